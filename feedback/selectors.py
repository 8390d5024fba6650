"""Reads for the feedback app."""

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------

from collections import defaultdict

from django.db import connection
from django.db.models import Count, Q, Sum
from pgvector.django import CosineDistance

from feedback.models import DisambiguationRequest, LearningSignal, PhraseEvidence


def verb_penalties(
    *, vector, model: str, user_id: str | None, verbs: list[str], similarity: float, per_unit: float, cap: float, k: int = 20
) -> dict[str, float]:
    """Score penalty per verb from the user's negative evidence near ``vector``, net of positive evidence.

    One indexed query: the ``k`` evidence rows of this scope nearest the query
    for the candidate verbs. A row at cosine ``s >= similarity`` weighs
    ``(s - similarity) / (1 - similarity)``; per verb the weighted
    ``negative - positive`` (never below 0) times ``per_unit`` is the penalty.
    """
    if not verbs or vector is None:
        return {}
    scope = Q(user_id=user_id) if user_id else Q(user_id__isnull=True)
    rows = (
        PhraseEvidence.objects.filter(scope, verb__in=verbs, embedding_model=model)
        .annotate(distance=CosineDistance("embedding", vector))
        .filter(distance__lte=1.0 - similarity)
        .order_by("distance")
        .values_list("verb", "distance", "negative", "positive")[:k]
    )
    net: dict[str, float] = defaultdict(float)
    span = max(1.0 - similarity, 1e-6)
    for verb, distance, negative, positive in rows:
        weight = min(1.0, max(0.0, (1.0 - distance - similarity) / span))
        net[verb] += weight * (negative - positive)
    return {v: round(min(cap, per_unit * n), 4) for v, n in net.items() if n > 0}


def disambiguation_outcomes_per_verb() -> list[dict]:
    """Per verb offered as an option: how many requests showed it, and the shares selected (it / another), abandoned, expired, open."""
    sql = f"""
        SELECT o->>'verb' AS verb, COUNT(*) AS shown,
               COUNT(*) FILTER (WHERE r.status = 'selected' AND r.selected_verb = o->>'verb') AS chosen,
               COUNT(*) FILTER (WHERE r.status = 'selected') AS selected,
               COUNT(*) FILTER (WHERE r.status = 'abandoned') AS abandoned,
               COUNT(*) FILTER (WHERE r.status = 'expired') AS expired,
               COUNT(*) FILTER (WHERE r.status = 'open') AS open
        FROM {DisambiguationRequest._meta.db_table} r, jsonb_array_elements(r.options) o
        GROUP BY 1 ORDER BY shown DESC, verb
    """
    with connection.cursor() as cur:
        cur.execute(sql)
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    for r in rows:
        for key in ("chosen", "selected", "abandoned", "expired", "open"):
            r[f"{key}_pct"] = round(100.0 * r[key] / r["shown"], 1) if r["shown"] else 0.0
    return rows


def signals_per_phrase(*, search: str = "", limit: int = 200) -> list[dict]:
    """Signals grouped by (phrase, user, verb): positive and negative counts and confidence sums."""
    qs = LearningSignal.objects.all()
    if search:
        qs = qs.filter(normalized__icontains=search.casefold())
    return list(
        qs.values("normalized", "user_id", "verb")
        .annotate(
            positive=Count("id", filter=Q(is_negative=False)),
            negative=Count("id", filter=Q(is_negative=True)),
            positive_confidence=Sum("confidence", filter=Q(is_negative=False)),
            negative_confidence=Sum("confidence", filter=Q(is_negative=True)),
        )
        .order_by("normalized", "user_id", "verb")[:limit]
    )


# --- out: proposals, executions, feedback records, mistake patterns (issues 6-7) ---
# Every read is scoped to the calling agent: another agent's objects are simply not found (404).

from config.api import NotFound as _OutNotFound  # noqa: E402
from feedback.models import Execution as _OutExecution  # noqa: E402
from feedback.models import FeedbackRecord as _OutFeedbackRecord  # noqa: E402
from feedback.models import MistakePattern as _OutMistakePattern  # noqa: E402
from feedback.models import Proposal as _OutProposal  # noqa: E402


def _out_filter(qs, filters: dict, allowed: dict):
    for key, lookup in allowed.items():
        value = filters.get(key)
        if value not in (None, ""):
            qs = qs.filter(**{lookup: value})
    return qs


def proposal_get(*, agent, pk: int) -> _OutProposal:
    obj = _OutProposal.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise _OutNotFound(f"Proposal {pk} not found.", field="id")
    return obj


def proposal_list(*, agent, filters: dict):
    qs = _OutProposal.objects.select_related("action").filter(agent=agent)
    return _out_filter(qs, filters, {"action": "action__name", "status": "status"})


def execution_get(*, agent, pk: int) -> _OutExecution:
    obj = _OutExecution.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise _OutNotFound(f"Execution {pk} not found.", field="id")
    return obj


def execution_list(*, agent, filters: dict):
    qs = _OutExecution.objects.select_related("action").filter(agent=agent)
    return _out_filter(qs, filters, {"action": "action__name", "status": "review_outcome"})


def feedback_record_list(*, agent, filters: dict):
    qs = _OutFeedbackRecord.objects.select_related("action").filter(agent=agent)
    return _out_filter(qs, filters, {"action": "action__name", "feedback_type": "feedback_type", "status": "pattern__status"})


def mistake_pattern_list(*, agent, filters: dict):
    qs = _OutMistakePattern.objects.select_related("action").filter(agent=agent)
    return _out_filter(qs, filters, {"action": "action__name", "feedback_type": "category", "status": "status"})
