"""Writes of learning candidates: record, approve, reject."""

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Least
from django.utils import timezone

from agents.selectors import agents_gone_private, agents_private
from common.api import ApplicationError, Conflict, Forbidden
from common.text import normalize_phrase
from embeddings.services import embedding_assign, embeddings_compute
from learning.models import EntityAlias, LearningCandidate, Verb
from learning.selectors import phrase_owner
from learning.services.blocks import _RISK_ORDER, _phrase_block_put, block_refusal_check
from learning.services.phrases import _learned_phrase_put, phrase_text_lock
from tenants.context import acting_agent_id, private_agent_id, tenant_scope

logger = logging.getLogger(__name__)

# The longest text a candidate (and the learned phrase it becomes) holds, as typed and normalised.
CANDIDATE_TEXT_MAX = LearningCandidate._meta.get_field("input_pattern").max_length


def candidate_text_fits(text: str) -> bool:
    """Whether ``text`` fits a candidate: as typed (stripped) and normalised, at most ``CANDIDATE_TEXT_MAX``
    characters. A resolve takes longer texts; a click on one teaches no phrase (its evidence still counts)."""
    return len(text.strip()) <= CANDIDATE_TEXT_MAX and len(normalize_phrase(text)) <= CANDIDATE_TEXT_MAX


def _candidate_check_open(candidate: LearningCandidate, *, allowed: tuple[str, ...]) -> None:
    if candidate.status not in allowed:
        raise Conflict(
            f"Candidate {candidate.pk} is already {candidate.status}.",
            field="status",
            code="invalid_status",
            extra={"status": candidate.status},
        )


def _candidate_verb(candidate: LearningCandidate) -> Verb:
    verb = Verb.objects.filter(tenant_id=candidate.tenant_id, name=candidate.suggested_output, is_active=True).first()
    if verb is None:
        raise ApplicationError(
            f"Unknown or inactive verb {candidate.suggested_output!r}.", field="suggested_output", code="unknown_verb"
        )
    return verb


def candidate_record(
    *,
    candidate_type: str = LearningCandidate.Type.INVOCATION_PHRASE,
    input_pattern: str,
    suggested_output: str,
    user_id: str | None,
    source: str,
    confidence: float,
    previous_output: str = "",
    rejected_alternatives: list[str] | None = None,
    risk_level: str = LearningCandidate.Risk.LOW,
    explanation: str = "",
) -> LearningCandidate:
    """Create the pending candidate or, for a proposal already pending, raise its occurrences atomically.

    Confidences of repeated proposals combine as a noisy-OR: ``1 - (1 - old) * (1 - new)``.
    """
    if candidate_type not in LearningCandidate.Type.values:
        raise ApplicationError(f"Unknown candidate type {candidate_type!r}.", field="candidate_type")
    if risk_level not in LearningCandidate.Risk.values:
        raise ApplicationError(f"Unknown risk level {risk_level!r}.", field="risk_level")
    if not 0.0 <= confidence <= 1.0:
        raise ApplicationError("Confidence must be between 0 and 1.", field="confidence")
    normalized = normalize_phrase(input_pattern)
    suggested_output = suggested_output.strip()
    if not normalized:
        raise ApplicationError("The input pattern is empty.", field="input_pattern")
    if not candidate_text_fits(input_pattern):
        raise ApplicationError(
            f"The input pattern is too long once normalised (at most {CANDIDATE_TEXT_MAX} characters).",
            field="input_pattern",
            code="too_long",
        )
    if not suggested_output:
        raise ApplicationError("The suggested output is empty.", field="suggested_output")
    alternatives = [str(a) for a in (rejected_alternatives or [])]
    key = {
        "candidate_type": candidate_type,
        "normalized": normalized,
        "suggested_output": suggested_output,
        "user_id": user_id,
        # an agent with private user data keeps its users' proposals apart: no shared traffic adds to them, and
        # theirs to no shared one
        "private_agent_id": phrase_owner(user_id),
    }
    pending = LearningCandidate.objects.filter(status=LearningCandidate.Status.PENDING, **key)

    with transaction.atomic():
        for _attempt in range(3):
            row = pending.select_for_update().first()
            if row is not None:
                break
            try:
                with transaction.atomic():
                    return LearningCandidate.objects.create(
                        **key,
                        input_pattern=input_pattern.strip(),
                        previous_output=previous_output,
                        confidence=confidence,
                        source=source,
                        risk_level=risk_level,
                        rejected_alternatives=alternatives,
                        explanation=explanation,
                        proposed_by_agent_id=acting_agent_id(),
                        seen_by_agents=[] if acting_agent_id() is None else [acting_agent_id()],
                    )
            except IntegrityError:
                continue  # another connection created it meanwhile: bump that row instead
        else:
            raise Conflict("The candidate changed meanwhile; retry.", field="input_pattern")
        agent_id = acting_agent_id()
        seen = {}
        if agent_id is not None and agent_id not in row.seen_by_agents:  # the row is locked: no lost append
            seen["seen_by_agents"] = [*row.seen_by_agents, agent_id]
        LearningCandidate.objects.filter(pk=row.pk).update(
            occurrence_count=F("occurrence_count") + 1,
            confidence=Least(Value(1.0), Value(1.0) - (Value(1.0) - F("confidence")) * Value(1.0 - confidence)),
            last_seen_at=timezone.now(),
            updated_at=timezone.now(),
            **seen,
        )
        row.refresh_from_db()
        # The row is locked until commit, so merging the small text fields here is safe.
        changed = []
        merged = row.rejected_alternatives + [a for a in alternatives if a not in row.rejected_alternatives]
        if merged != row.rejected_alternatives:
            row.rejected_alternatives = merged
            changed.append("rejected_alternatives")
        if _RISK_ORDER[risk_level] > _RISK_ORDER.get(row.risk_level, 0):
            row.risk_level = risk_level
            changed.append("risk_level")
        if explanation and explanation != row.explanation:
            row.explanation = explanation
            changed.append("explanation")
        if previous_output and not row.previous_output:
            row.previous_output = previous_output
            changed.append("previous_output")
        row.save(update_fields=changed or None)  # also writes the history record of the bump
    return row


def candidates_close_for_correction(*, normalized: str, user_id: str, verb_name: str, text: str) -> list[int]:
    """Inside a transaction: the user said ``text`` does not mean ``verb_name``; their pending candidates proposing it
    (of the acting agent's kind: a private agent's own, else those the shared agents' traffic proposed) are rejected
    with that reason, so a later repeat cannot promote them over the correction. Answers the ids closed."""
    rows = list(
        LearningCandidate.objects.select_for_update()
        .filter(
            status=LearningCandidate.Status.PENDING,
            candidate_type=LearningCandidate.Type.INVOCATION_PHRASE,
            normalized=normalized,
            user_id=user_id,
            suggested_output=verb_name,
        )
        .order_by("pk")
    )
    mine = private_agent_id()
    closed = []
    for row in rows:
        ids = {*row.seen_by_agents, *([row.proposed_by_agent_id] if row.proposed_by_agent_id else [])}
        if mine is not None:
            ours = mine in ids
        else:
            private = agents_private(ids=ids)
            ours = not ids or bool(ids - private - agents_gone_private(ids=ids - private))
        if not ours:
            continue
        row.status = LearningCandidate.Status.REJECTED
        row.review_reason = f"The user corrected it: {text.strip()!r} does not mean {verb_name}."
        row.reviewed_at = timezone.now()
        row._change_reason = "closed by the user's correction"
        row.save()
        closed.append(row.pk)
    return closed


def _candidate_check_decider(row: LearningCandidate, *, agent) -> None:
    """Four eyes: an agent's key never decides a candidate that agent's own traffic proposed or repeated."""
    if agent is not None and (row.proposed_by_agent_id == agent.pk or agent.pk in row.seen_by_agents):
        raise Forbidden(
            "An agent may not decide a candidate it proposed; a reviewer or another agent's governance key must.",
            field="candidate_id",
        )


def _decided_by(row, *, reviewer, agent) -> None:
    """Record who decided (a Django user in the admin, or the agent whose key called the API) and when."""
    row.reviewed_by, row.reviewed_by_agent, row.reviewed_at = reviewer, agent, timezone.now()
    row._history_user = reviewer
    if agent is not None:
        row._change_reason = f"API, agent {agent.name}"


def candidate_approve(
    *, candidate: LearningCandidate, reviewer=None, apply_immediately: bool = True, agent=None, automatic: bool = False
) -> LearningCandidate:
    """Approve a candidate; by default apply it at once (learned phrase or alias with its vector, status ``applied``).

    ``reviewer`` is the Django user (admin), ``agent`` the agent whose governance key called the API; both None
    for automatic promotion (``automatic``), which never re-points a user's phrase taught on purpose to another verb
    (409 ``explicit_phrase``: the candidate stays pending for a reviewer, whose approval may re-point it).
    """
    _candidate_check_open(candidate, allowed=(LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED))
    vectors, model = embeddings_compute(texts=[candidate.normalized]) if apply_immediately else (None, "")
    with tenant_scope([candidate.tenant_id]):  # its tenant's verb and phrases, whoever decides (a superuser sees all)
        phrase_text_lock(normalized=candidate.normalized)
        row = LearningCandidate.objects.select_for_update().get(pk=candidate.pk)
        _candidate_check_open(row, allowed=(LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED))
        _candidate_check_decider(row, agent=agent)
        if row.status == LearningCandidate.Status.APPROVED and not apply_immediately:
            return row
        if apply_immediately:
            _candidate_apply(row, vectors=vectors, model=model, reviewer=reviewer, automatic=automatic)
            row.status = LearningCandidate.Status.APPLIED
        else:
            row.status = LearningCandidate.Status.APPROVED
        _decided_by(row, reviewer=reviewer, agent=agent)
        row.save()
    return row


def _candidate_apply(row: LearningCandidate, *, vectors, model: str, reviewer, automatic: bool = False) -> None:
    if row.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        alias = (
            EntityAlias.objects.select_for_update()
            .filter(normalized=row.normalized, entity_type="entity", user_id=row.user_id)
            .first()
        )
        alias = alias or EntityAlias(normalized=row.normalized, entity_type="entity", user_id=row.user_id)
        alias.alias, alias.canonical_name, alias.source = row.input_pattern, row.suggested_output, "candidate"
        alias.confidence, alias.occurrence_count, alias.is_active = (
            settings.LEARNING_APPROVED_CONFIDENCE,
            row.occurrence_count,
            True,
        )
        embedding_assign(rows=[alias], vectors=vectors, model=model)
        alias._history_user = reviewer
        alias.save()
        return
    verb = _candidate_verb(row)

    block_refusal_check(
        text=row.input_pattern,
        normalized=row.normalized,
        verb=verb,
        user_id=row.user_id,
        vectors=vectors,
        model=model,
        field="suggested_output",
        hint="; remove the block first",
    )
    # promoted by a user's click: only the acting agent's kind learns it (a reviewer's approval reaches every owner)
    owners = [phrase_owner(row.user_id)] if automatic else _candidate_owners(row)
    for owner in owners:
        _learned_phrase_put(
            phrase=row.input_pattern,
            normalized=row.normalized,
            verb=verb,
            user_id=row.user_id,
            source="candidate",
            confidence=settings.LEARNING_APPROVED_CONFIDENCE,
            vectors=vectors,
            model=model,
            occurrence_count=row.occurrence_count,
            history_user=reviewer,
            owner=owner,
            keep_explicit=automatic,
        )


def _candidate_owners(row: LearningCandidate) -> list[int | None]:
    """Whose the user's phrase is once the candidate applies: the acting agent's when its user data is private and
    its own click promoted it at once; else (an approval: a deciding agent never proposed it) every owner whose
    traffic proposed or repeated it: each agent with private user data among them gets its own row, and the shared
    agents one row if any of them did (or when no agent is recorded). An agent with private user data deleted since
    gets none (its users' phrases went with it); when it was the only one, the approval is refused."""
    if not row.user_id:
        return [None]
    ids = {*row.seen_by_agents, *([row.proposed_by_agent_id] if row.proposed_by_agent_id else [])}
    if private_agent_id() is not None and private_agent_id() in ids:
        return [private_agent_id()]
    private = agents_private(ids=ids)
    gone = agents_gone_private(ids=ids - private)
    shared = not ids or bool(ids - private - gone)
    owners = sorted(private) + ([None] if shared else [])
    if not owners:
        raise Conflict(
            "The agents whose users proposed it kept their user data private and were deleted since, with their users' "
            "phrases; nobody is left to learn it for. Reject it.",
            field="candidate_id",
            code="owner_deleted",
        )
    return owners


def candidate_reject(
    *, candidate: LearningCandidate, reviewer=None, reason: str = "", add_to_blocklist: bool = False, agent=None
) -> LearningCandidate:
    """Reject a candidate with a reason; optionally block its phrase → verb (and paraphrases) in its scope."""
    allowed = (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED)
    _candidate_check_open(candidate, allowed=allowed)
    if add_to_blocklist and candidate.candidate_type != LearningCandidate.Type.INVOCATION_PHRASE:
        raise ApplicationError("Only invocation phrases can be blocklisted.", field="add_to_blocklist")
    vectors, model = embeddings_compute(texts=[candidate.normalized]) if add_to_blocklist else (None, "")
    with tenant_scope([candidate.tenant_id]):  # its tenant's verb and blocks, whoever decides
        verb = _candidate_verb(candidate) if add_to_blocklist else None
        row = LearningCandidate.objects.select_for_update().get(pk=candidate.pk)
        _candidate_check_open(row, allowed=allowed)
        _candidate_check_decider(row, agent=agent)
        row.status, row.review_reason = LearningCandidate.Status.REJECTED, reason
        _decided_by(row, reviewer=reviewer, agent=agent)
        row.save()
        if verb is not None:
            _phrase_block_put(
                phrase=row.input_pattern,
                normalized=row.normalized,
                verb=verb,
                user_id=row.user_id,
                reason=reason or f"rejected candidate {row.pk}",
                source="candidate",
                expires_at=None,
                vectors=vectors,
                model=model,
                history_user=reviewer,
            )
    return row
