"""Handing an agent's private user data to the tenant's shared agents, once the agent is no longer private."""

import logging

from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Case, DateTimeField, Exists, F, OuterRef, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone

from agents.selectors import agent_shared_required
from common.api import Conflict
from learning.models import LearnedPhrase, LearningCandidate, PhraseEvidence

logger = logging.getLogger(__name__)

CONFLICTS_LISTED = 20


def private_phrases_share(*, agent, dry_run: bool = False) -> dict:
    """The learned phrases and phrase evidence ``agent`` owns (written while its user data was private) become
    the tenant's shared data, in one transaction, with its users' learning candidates (a pending one adds into the
    shared pending candidate of the same text and verb when there is one: counts, a noisy-OR of the confidences, the
    agents that proposed it). A phrase whose user already has an active shared row for the
    same text and verb is added into it (its count; the private row goes); one whose shared row names another verb
    (or was deactivated) stays the agent's (one verb per text and scope: the shared row is not overwritten) and is
    listed as a conflict; evidence for a text and verb that has a shared row is added into it. Refused while the
    agent's user data is still private."""
    shared_phrase = LearnedPhrase.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        normalized=OuterRef("normalized"),
        user_id=OuterRef("user_id"),
        private_agent__isnull=True,
    )
    shared_evidence = PhraseEvidence.objects.filter(
        tenant_id=OuterRef("tenant_id"), normalized=OuterRef("normalized"), verb=OuterRef("verb"), private_agent__isnull=True
    )
    # Evidence of a request without a user has none: the NULL user is one scope (the unique key's NULLS NOT DISTINCT).
    evidence_taken = Case(
        When(user_id__isnull=True, then=Exists(shared_evidence.filter(user_id__isnull=True))),
        default=Exists(shared_evidence.filter(user_id=OuterRef("user_id"))),
        output_field=BooleanField(),
    )
    try:
        with transaction.atomic():
            agent_shared_required(agent=agent)
            owned = LearnedPhrase.objects.select_for_update().filter(private_agent=agent).order_by("pk")
            rows = list(
                owned.annotate(
                    taken=Exists(shared_phrase),
                    same=Exists(shared_phrase.filter(verb_id=OuterRef("verb_id"), is_active=True)),
                ).select_related("verb")
            )
            moving = [r for r in rows if not r.taken]
            same = [r for r in rows if r.same]
            conflicts = [r for r in rows if r.taken and not r.same]
            shared_verbs = {
                (user_id, normalized): verb
                for user_id, normalized, verb in LearnedPhrase.objects.filter(
                    private_agent__isnull=True,
                    user_id__in={r.user_id for r in conflicts},
                    normalized__in={r.normalized for r in conflicts},
                ).values_list("user_id", "normalized", "verb__name")
            }
            evidence = list(
                PhraseEvidence.objects.select_for_update()
                .filter(private_agent=agent)
                .annotate(taken=evidence_taken)
                .order_by("pk")
            )
            merged = [e for e in evidence if e.taken]
            candidates = list(LearningCandidate.objects.select_for_update().filter(private_agent=agent).order_by("pk"))
            twins = _shared_twins(candidates)
            if not dry_run:
                now = timezone.now()
                _rows_shared(LearnedPhrase, [r.pk for r in moving], agent=agent, now=now)
                for r in same:  # the shared row says the same: it takes the private row's count, the private row goes
                    LearnedPhrase.objects.filter(
                        tenant_id=r.tenant_id,
                        normalized=r.normalized,
                        user_id=r.user_id,
                        verb_id=r.verb_id,
                        private_agent__isnull=True,
                    ).update(
                        occurrence_count=F("occurrence_count") + r.occurrence_count,
                        confidence=Greatest("confidence", Value(r.confidence)),
                        last_matched_at=Greatest("last_matched_at", Value(r.last_matched_at, DateTimeField())),
                        updated_at=now,
                    )
                    r._change_reason = f"added into the shared phrase: agent {agent.name} no longer private"
                    r.delete()
                for e in merged:  # few per user; each adds into its shared row
                    PhraseEvidence.objects.filter(
                        tenant_id=e.tenant_id, normalized=e.normalized, verb=e.verb, user_id=e.user_id, private_agent__isnull=True
                    ).update(
                        negative=F("negative") + e.negative,
                        positive=F("positive") + e.positive,
                        signal_count=F("signal_count") + e.signal_count,
                        updated_at=now,
                    )
                PhraseEvidence.objects.filter(pk__in=[e.pk for e in merged]).delete()
                PhraseEvidence.objects.filter(private_agent=agent).update(private_agent=None, updated_at=now)
                _candidates_share(candidates, twins, agent=agent)
    except IntegrityError:  # a shared row for one of these texts was written meanwhile
        raise Conflict("Shared phrases changed meanwhile; nothing was moved. Run it again.", field="agent") from None
    result = {
        "agent": agent.name,
        "dry_run": dry_run,
        "phrases_shared": len(moving),
        "phrases_merged": len(same),
        "phrases_kept": len(conflicts),
        "evidence_shared": len(evidence) - len(merged),
        "evidence_merged": len(merged),
        "candidates_shared": len(candidates) - len(twins),
        "candidates_merged": len(twins),
        "conflicts": [
            {
                "user_id": r.user_id,
                "phrase": r.phrase,
                "verb": r.verb.name,
                "shared_verb": shared_verbs.get((r.user_id, r.normalized), ""),
            }
            for r in conflicts[:CONFLICTS_LISTED]
        ],
    }
    logger.info("private phrases of agent %s shared: %s", agent.name, {k: v for k, v in result.items() if k != "conflicts"})
    return result


def _candidate_key(c) -> tuple:
    return (c.tenant_id, c.candidate_type, c.normalized, c.suggested_output, c.user_id)


def _shared_twins(candidates) -> dict:
    """The pending shared candidate (locked) each pending private one adds into, by the private one's pk."""
    pending = [c for c in candidates if c.status == LearningCandidate.Status.PENDING]
    if not pending:
        return {}
    shared = {
        _candidate_key(t): t
        for t in LearningCandidate.objects.select_for_update()
        .filter(
            status=LearningCandidate.Status.PENDING,
            private_agent__isnull=True,
            normalized__in={c.normalized for c in pending},
            user_id__in={c.user_id for c in pending},
        )
        .order_by("pk")
    }
    return {c.pk: shared[_candidate_key(c)] for c in pending if _candidate_key(c) in shared}


def _candidates_share(candidates, twins: dict, *, agent) -> None:
    """Each private candidate adds into its shared twin (then goes), or becomes shared itself."""
    now = timezone.now()
    for c in candidates:
        twin = twins.get(c.pk)
        if twin is None:
            continue
        twin.occurrence_count += c.occurrence_count
        twin.confidence = min(1.0, 1.0 - (1.0 - twin.confidence) * (1.0 - c.confidence))
        twin.seen_by_agents = sorted({*twin.seen_by_agents, *c.seen_by_agents})
        twin.last_seen_at = max(twin.last_seen_at, c.last_seen_at)
        twin._change_reason = f"added the candidate of agent {agent.name}, no longer private"
        twin.save(update_fields=["occurrence_count", "confidence", "seen_by_agents", "last_seen_at", "updated_at"])
        c._change_reason = f"added into the shared candidate: agent {agent.name} no longer private"
        c.delete()
    _rows_shared(LearningCandidate, [c.pk for c in candidates if c.pk not in twins], agent=agent, now=now)


def _rows_shared(model, pks: list[int], *, agent, now) -> None:
    """These rows of ``model`` (with an audit trail) become the shared agents', each with a history row saying so."""
    model.objects.filter(pk__in=pks).update(private_agent=None, updated_at=now)
    if pks:
        model.history.bulk_history_create(
            list(model.objects.filter(pk__in=pks)),
            update=True,
            default_change_reason=f"shared: agent {agent.name} no longer private",
        )
