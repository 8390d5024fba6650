"""Reads for governance: learning candidates, stats, the admin dashboard, import planning and decay targets."""

from datetime import timedelta

import numpy as np
from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from agents.models import Agent
from common.api import NotFound
from embeddings.selectors import nearest
from learning.models import (
    EntityAlias,
    LearnedPhrase,
    LearningCandidate,
    Verb,
)
from learning.selectors.owners import phrase_owner
from learning.selectors.review import candidates_waiting
from learning.selectors.tiers import unexpired_blocks
from tenants.context import acting_agent_id

STATS_RANGES = {"day": timedelta(days=1), "week": timedelta(weeks=1), "month": timedelta(days=30), "all": None}


def correction_decay_targets(
    *, vector: np.ndarray, model: str, user_id: str, verb: Verb, exclude_normalized: str, threshold: float, k: int = 20
) -> dict[int, str]:
    """The user's own active phrases for ``verb`` (of the acting agent's kind: ``phrase_owner``) that match the vector
    within ``threshold`` (semantic anchors): their ids and normalised texts."""
    rows = nearest(
        LearnedPhrase.objects.filter(
            user_id=user_id, private_agent_id=phrase_owner(user_id), verb=verb, is_active=True, embedding_model=model
        ).exclude(normalized=exclude_normalized),
        vector,
        k,
        project=lambda q: q.values_list("pk", "normalized", "distance"),
    )
    return {pk: text for pk, text, d in rows if 1.0 - d >= threshold}


def candidates_readable() -> QuerySet[LearningCandidate]:
    """The candidates the caller may read. A reviewer reads every one; an agent's key does not read a candidate that
    only agents with private user data other than itself proposed or repeated: its text is their users' data."""
    qs = LearningCandidate.objects.all()
    me = acting_agent_id()
    if me is None:
        return qs
    shared = ArraySubquery(Agent.objects.filter(private_user_data=False).values("pk"))  # computed once per query
    return qs.filter(Q(seen_by_agents=[]) | Q(seen_by_agents__contains=[me]) | Q(seen_by_agents__overlap=shared))


def candidate_list(
    *,
    status: str | None = None,
    candidate_type: str | None = None,
    min_occurrences: int | None = None,
    risk_level: str | None = None,
    user_id: str | None = None,
) -> QuerySet[LearningCandidate]:
    """Candidates the caller may read, pending first, then by occurrences and recency."""
    qs = candidates_readable()
    if status:
        qs = qs.filter(status=status)
    if candidate_type:
        qs = qs.filter(candidate_type=candidate_type)
    if min_occurrences:
        qs = qs.filter(occurrence_count__gte=min_occurrences)
    if risk_level:
        qs = qs.filter(risk_level=risk_level)
    if user_id:
        qs = qs.filter(user_id=user_id)
    return qs.order_by(pending_first(), "-occurrence_count", "-last_seen_at", "-pk")


def pending_first():
    from django.db.models import Case, IntegerField, Value, When

    return Case(When(status=LearningCandidate.Status.PENDING, then=Value(0)), default=Value(1), output_field=IntegerField())


def top_pending_candidates(limit: int | None = None) -> list[LearningCandidate]:
    """The most seen candidates that wait for a human (per-user ones that apply themselves do not), of those the
    caller may read."""
    limit = limit or settings.LEARNING_STATS_TOP_PENDING
    return list(
        candidates_waiting()
        .filter(pk__in=candidates_readable().values("pk"))
        .order_by("-occurrence_count", "-last_seen_at", "-pk")[:limit]
    )


def learning_stats(*, time_range: str = "week") -> dict:
    """Counts for reviewers: candidates by status (created within the range), active learnings, top pending phrases.
    An agent's key counts only what it may read: not the candidates and phrases of another agent's private users."""
    since = None
    if STATS_RANGES[time_range] is not None:
        since = timezone.now() - STATS_RANGES[time_range]
    candidates = candidates_readable()
    phrases = LearnedPhrase.objects.filter(is_active=True)
    if acting_agent_id() is not None:
        phrases = phrases.filter(Q(private_agent__isnull=True) | Q(private_agent_id=acting_agent_id()))
    if since is not None:
        candidates = candidates.filter(created_at__gte=since)
    by_status = {s: 0 for s in LearningCandidate.Status.values}
    by_status.update(dict(candidates.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n")))
    return {
        "time_range": time_range,
        "since": since,
        "candidates_by_status": by_status,
        "candidates_total": sum(by_status.values()),
        "active_learned_phrases": phrases.count(),
        "active_aliases": EntityAlias.objects.filter(is_active=True).count(),
        "active_blocklist_entries": unexpired_blocks().count(),
        "top_pending": top_pending_candidates(),
    }


def dashboard_counts() -> dict:
    """The admin index dashboard: what waits for review and what is in force."""
    week_ago = timezone.now() - timedelta(weeks=1)
    return {
        "pending_candidates": candidates_waiting().count(),  # what the review inbox lists
        "approved_this_week": LearningCandidate.objects.filter(
            status__in=[LearningCandidate.Status.APPROVED, LearningCandidate.Status.APPLIED], reviewed_at__gte=week_ago
        ).count(),
        "active_learned_phrases": LearnedPhrase.objects.filter(is_active=True).count(),
        "active_blocklist_entries": unexpired_blocks().count(),
        "top_pending": top_pending_candidates(),
    }


def import_existing(*, normalized: list[str], user_id: str | None) -> dict[str, LearnedPhrase]:
    """Learned phrases of one scope by normalized text (for import planning)."""
    qs = LearnedPhrase.objects.filter(normalized__in=normalized)
    qs = qs.filter(user_id=user_id, private_agent_id=phrase_owner(user_id)) if user_id else qs.filter(user_id__isnull=True)
    return {
        row.normalized: row
        for row in qs.only("pk", "normalized", "verb_id", "is_active", "source", "confidence", "embedding_model")
    }


# The largest id a candidate's key (a PostgreSQL bigint) can hold.
CANDIDATE_ID_MAX = 2**63 - 1


def candidate_id_check(*, candidate_id: int) -> None:
    """404, as for any unknown id, when no candidate key can hold ``candidate_id`` (out of the bigint range):
    callable before anything hands the id to SQL that would refuse it."""
    if not 0 < candidate_id <= CANDIDATE_ID_MAX:
        raise NotFound(f"No learning candidate {candidate_id}.", field="id")


def candidate_get(*, candidate_id: int) -> LearningCandidate:
    """The learning candidate with this id (404 when there is none or the caller may not read it, out-of-range ids
    included)."""
    candidate_id_check(candidate_id=candidate_id)
    row = candidates_readable().filter(pk=candidate_id).first()
    if row is None:
        raise NotFound(f"No learning candidate {candidate_id}.", field="id")
    return row
