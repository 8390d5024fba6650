"""Reads of what users answered: evidence balance, outcomes per verb, signals per phrase, gold labels and
fitted resolution profiles."""

import time as _time
from collections import defaultdict

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, Sum

from embeddings.selectors import nearest
from learning.models import (
    DisambiguationRequest,
    FittedResolutionProfile,
    LearnedPhrase,
    LearningSignal,
    VerbPhrase,
)
from learning.scoring import semantic_scores
from learning.selectors.tiers import Hit, scope_q
from tenants.context import tenant_filter_ids


def verb_evidence_balance(evidence: list[tuple[str, float, float]], *, verbs: list[str], similarity: float) -> dict[str, float]:
    """Per verb, the user's feedback evidence near the query: weighted negative minus positive.

    ``evidence`` is (verb, cosine to the query, negative - positive) for the evidence rows of this
    scope nearest the query (learning.selectors.tier_rows reads them in the resolver's one query).
    A row at cosine ``s >= similarity`` weighs ``(s - similarity) / (1 - similarity)``. Above 0 the verb
    was turned down near here (the resolver lowers it); below 0 the user chose it near here.
    """
    wanted = set(verbs)
    net: dict[str, float] = defaultdict(float)
    span = max(1.0 - similarity, 1e-6)
    for verb, cosine, balance in evidence:
        if verb in wanted and cosine >= similarity:
            net[verb] += min(1.0, (cosine - similarity) / span) * balance
    return dict(net)


def disambiguation_outcomes_per_verb(*, since=None) -> list[dict]:
    """Per verb offered as an option in the requests made ``since`` (a datetime; None: every request kept): how many
    requests showed it, and the shares selected (it / another), abandoned, expired, open."""
    where = "WHERE r.created_at >= %(since)s" if since is not None else ""
    sql = f"""
        SELECT o->>'verb' AS verb, COUNT(*) AS shown,
               COUNT(*) FILTER (WHERE r.status = 'selected' AND r.selected_verb = o->>'verb') AS chosen,
               COUNT(*) FILTER (WHERE r.status = 'selected') AS selected,
               COUNT(*) FILTER (WHERE r.status = 'abandoned') AS abandoned,
               COUNT(*) FILTER (WHERE r.status = 'expired') AS expired,
               COUNT(*) FILTER (WHERE r.status = 'open') AS open
        FROM {DisambiguationRequest._meta.db_table} r, jsonb_array_elements(r.options) o
        {where}
        GROUP BY 1 ORDER BY shown DESC, verb
    """
    with connection.cursor() as cur:
        cur.execute(sql, {"since": since})
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r, strict=False)) for r in cur.fetchall()]
    for r in rows:
        for key in ("chosen", "selected", "abandoned", "expired", "open"):
            r[f"{key}_pct"] = round(100.0 * r[key] / r["shown"], 1) if r["shown"] else 0.0
    return rows


def signals_per_phrase(*, search: str = "", limit: int = 200, since=None) -> list[dict]:
    """Signals grouped by (phrase, user, verb): positive and negative counts and confidence sums; of the requests made
    ``since`` (a datetime; None: every signal kept), found through the requests' date index."""
    qs = LearningSignal.objects.all()
    if since is not None:
        qs = qs.filter(request__in=DisambiguationRequest.objects.filter(created_at__gte=since).values("pk"))
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


_active_profile_cache: dict[tuple, tuple[float, dict]] = {}  # (tenants in scope, model) -> (expiry, values)


def active_profile_values(model_name: str) -> dict:
    """{resolve_threshold, margin} of the active fitted profile for the model ({} if none); trusted by this process
    for ``RESOLVE_DECISION_CACHE_S``, as the decision fit in force (the process that activates one clears it)."""
    now = _time.monotonic()
    key = (tenant_filter_ids(), model_name)
    hit = _active_profile_cache.get(key)
    if hit and hit[0] > now:
        return hit[1]
    row = (
        FittedResolutionProfile.objects.filter(embedding_model=model_name, status=FittedResolutionProfile.Status.ACTIVE)
        .values("resolve_threshold", "margin")
        .first()
    )
    values = dict(row) if row else {}
    _active_profile_cache[key] = (now + settings.RESOLVE_DECISION_CACHE_S, values)
    return values


def active_profile_cache_clear() -> None:
    _active_profile_cache.clear()


def gold_labels(*, limit: int) -> list[tuple[str, str | None, str]]:
    """(normalized text, user_id, right verb): the users' clicks and corrections, newest first, one per (text, user)."""

    seen: dict[tuple[str, str | None], str] = {}
    clicks = (
        DisambiguationRequest.objects.filter(status=DisambiguationRequest.Status.SELECTED)
        .order_by("-answered_at")
        .values_list("normalized", "user_id", "selected_verb")[:limit]
    )
    corrections = (
        LearnedPhrase.objects.filter(source="correction", user_id__isnull=False)
        .order_by("-updated_at")
        .values_list("normalized", "user_id", "verb__name")[:limit]
    )
    for normalized, user_id, verb in list(clicks) + list(corrections):
        seen.setdefault((normalized, user_id), verb)
    return [(n, u, v) for (n, u), v in list(seen.items())[:limit]]


def leave_one_out_scores(
    *, normalized: str, user_id: str | None, vector, model: str, p: dict, k_learned: int = 20, k_catalogue: int = 30
) -> list[tuple[str, float]]:
    """Per-verb scores from the semantic tiers, scored as the resolver scores them
    (learning.scoring.semantic_scores, the function resolve uses), without the text's own learned rows."""

    learned = nearest(
        LearnedPhrase.objects.filter(scope_q(user_id), is_active=True, verb__is_active=True, embedding_model=model).exclude(
            normalized=normalized
        ),
        vector,
        k_learned,
        project=lambda q: q.values_list("verb__name", "distance", "confidence"),
    )
    catalogue = nearest(
        VerbPhrase.objects.filter(verb__is_active=True, embedding_model=model),
        vector,
        k_catalogue,
        project=lambda q: q.values_list("verb__name", "distance"),
    )
    scored = semantic_scores(
        learned=[Hit(verb, 1.0 - d, "", None, confidence) for verb, d, confidence in learned],
        catalogue=[Hit(verb, 1.0 - d, "", None) for verb, d in catalogue],
        k_learned=k_learned,
        k_catalogue=k_catalogue,
        p=p,
    )
    best = {verb: score for verb, (score, _, _) in scored.items()}
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


# Entity aliases: what a name stands for (``big blue`` → ``IBM``), the user's own before global ones.

# Cosine similarity an alias must reach to answer a name it does not spell exactly, per embedding model.
