"""Reads for the learning app: catalogue, learned phrases, blocklist, vector searches, candidates,
disambiguations, evidence and fitted profiles.

Vector searches order by pgvector's cosine distance so the HNSW index is used;
connections run with ``hnsw.iterative_scan`` so user and domain filters never
starve a search of results.
"""

import time
import time as _time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone
from pgvector.django import CosineDistance

from learning.models import (
    DisambiguationRequest,
    EntityAlias,
    FittedResolutionProfile,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    Verb,
    VerbPhrase,
)
from learning.scoring import semantic_scores


@dataclass(frozen=True)
class Hit:
    verb: str
    similarity: float
    text: str
    user_id: str | None
    confidence: float = 1.0


def scope_q(user_id: str | None) -> Q:
    """Global rows, plus the user's own when a user is given."""
    return Q(user_id__isnull=True) | Q(user_id=user_id) if user_id else Q(user_id__isnull=True)


def domain_exists(domain: str) -> bool:
    return Verb.objects.filter(is_active=True, domain=domain).exists()


def _verb_filter(prefix: str, domain: str | None) -> Q:
    q = Q(**{f"{prefix}is_active": True})
    if domain:
        q &= Q(**{f"{prefix}domain": domain})
    return q


@dataclass(frozen=True)
class ExactHit:
    verb: str
    description: str
    confidence: float
    user_id: str | None
    phrase: str
    blocked: bool  # a block in force (this scope) names the verb, for any phrase


def learned_exact(*, normalized: str, user_id: str | None, domain: str | None) -> list[ExactHit]:
    """Exact learned matches, the user's first, then global; in one query, on the resolve hot path."""
    params = {"n": normalized, "u": user_id, "now": timezone.now(), "d": domain}
    sql = f"""
        SELECT v.name, v.description, t.confidence, t.user_id, t.phrase,
               EXISTS (SELECT 1 FROM {PhraseBlock._meta.db_table} b
                       WHERE b.verb_id = t.verb_id AND (b.user_id IS NULL OR b.user_id = %(u)s)
                         AND (b.expires_at IS NULL OR b.expires_at > %(now)s))
        FROM {LearnedPhrase._meta.db_table} t JOIN {Verb._meta.db_table} v ON v.id = t.verb_id
        WHERE t.normalized = %(n)s AND t.is_active AND v.is_active
          AND (t.user_id IS NULL OR t.user_id = %(u)s){" AND v.domain = %(d)s" if domain else ""}
        ORDER BY t.user_id IS NULL, t.id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [ExactHit(*row) for row in cursor.fetchall()]


def vector_literal(vector) -> str:
    return "[" + ",".join(map(str, np.asarray(vector, dtype=np.float32).tolist())) + "]"


@dataclass
class TierRows:
    learned: list[Hit]
    blocked: set[str]
    phrases: list[tuple[str, str, str]]
    catalogue: list[Hit]
    descriptions: dict[str, str]
    evidence: list[tuple[str, float, float]]  # (verb, similarity, negative - positive) near the query


def tier_rows(
    *,
    normalized: str,
    vector,
    model: str,
    user_id: str | None,
    domain: str | None,
    k_learned: int,
    k_catalogue: int,
    k_blocks: int,
    block_threshold: float,
    learned: bool = True,
    k_evidence: int = 0,
    evidence_similarity: float = 1.0,
) -> TierRows:
    """Tiers 3-7 of resolution in ONE round trip: learned neighbours, blocked verbs, catalogue phrase
    matches and catalogue neighbours, and (``k_evidence`` > 0) the user's feedback evidence within
    ``evidence_similarity`` of the query. Each vector part orders by cosine distance so its HNSW index
    is used. Without a vector, only the text parts run (degraded mode)."""
    params: dict = {"n": normalized, "pat": f"%{normalized}%", "u": user_id, "m": model, "now": timezone.now()}
    verbs = "SELECT id, name, description FROM learning_verb WHERE is_active"
    if domain:
        verbs += " AND domain = %(domain)s"
        params["domain"] = domain
    scope = "(t.user_id IS NULL OR t.user_id = %(u)s)"
    # With a domain, filter inside the ordered scans (iterative index scans keep them from starving).
    in_domain = " AND t.verb_id = ANY(ARRAY(SELECT id FROM v))" if domain else ""
    parts = [
        # blocklist, exact text
        f"SELECT 'bx', v.name, 1.0::float8, t.phrase, NULL, 1.0::float8, '' FROM learning_phraseblock t "
        f"JOIN v ON v.id = t.verb_id WHERE t.normalized = %(n)s AND {scope} AND (t.expires_at IS NULL OR t.expires_at > %(now)s)",
        # catalogue phrases: equal to the text, contained in it, or containing it
        "SELECT CASE WHEN t.normalized = %(n)s THEN 'px' ELSE 'ps' END, v.name, 1.0::float8, t.text, t.normalized, 1.0::float8, v.description "
        "FROM learning_verbphrase t JOIN v ON v.id = t.verb_id "
        "WHERE %(n)s LIKE '%%' || t.normalized || '%%' OR t.normalized LIKE %(pat)s",
    ]
    if vector is not None:
        # The vector travels once, as an InitPlan parameter ((SELECT v FROM q)): the HNSW scans still use it as
        # their ordering key, and the server parses 384 floats once instead of once per tier.
        params.update(q=vector_literal(vector), kl=k_learned, kc=k_catalogue, kb=k_blocks)
        if learned:
            parts.append(
                "SELECT 'ls', v.name, 1.0 - x.d, x.phrase, x.user_id, x.confidence, v.description FROM ("
                f"SELECT t.verb_id, t.phrase, t.user_id, t.confidence, t.embedding <=> (SELECT v FROM q) AS d "
                f"FROM learning_learnedphrase t WHERE t.is_active AND {scope} AND t.embedding_model = %(m)s{in_domain} "
                "ORDER BY d LIMIT %(kl)s) x JOIN v ON v.id = x.verb_id"
            )
        parts.append(
            "SELECT 'bs', v.name, 1.0 - x.d, x.phrase, NULL, 1.0::float8, '' FROM ("
            f"SELECT t.verb_id, t.phrase, t.embedding <=> (SELECT v FROM q) AS d FROM learning_phraseblock t "
            f"WHERE {scope} AND (t.expires_at IS NULL OR t.expires_at > %(now)s) AND t.embedding_model = %(m)s "
            "ORDER BY d LIMIT %(kb)s) x JOIN v ON v.id = x.verb_id"
        )
        if k_evidence:
            # Evidence is kept per scope: the user's own, or global rows for global resolution.
            own = "t.user_id = %(u)s" if user_id else "t.user_id IS NULL"
            params.update(ke=k_evidence, de=1.0 - evidence_similarity)
            parts.append(
                "SELECT 'ev', x.verb, 1.0 - x.d, '', NULL, x.net, '' FROM ("
                f"SELECT t.verb, t.negative - t.positive AS net, t.embedding <=> (SELECT v FROM q) AS d FROM {PhraseEvidence._meta.db_table} t "
                f"WHERE {own} AND t.embedding_model = %(m)s ORDER BY d LIMIT %(ke)s) x WHERE x.d <= %(de)s"
            )
        parts.append(
            "SELECT 'cs', v.name, 1.0 - x.d, x.text, NULL, 1.0::float8, v.description FROM ("
            "SELECT t.verb_id, t.text, t.embedding <=> (SELECT v FROM q) AS d FROM learning_verbphrase t "
            f"WHERE t.embedding_model = %(m)s{in_domain} ORDER BY d LIMIT %(kc)s) x JOIN v ON v.id = x.verb_id"
        )
    ctes = f"v AS MATERIALIZED ({verbs})" + (", q AS (SELECT %(q)s::vector AS v)" if vector is not None else "")
    sql = f"WITH {ctes} " + " UNION ALL ".join(f"({p})" for p in parts)
    out = TierRows([], set(), [], [], {}, [])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    for tier, verb, score, text, extra, confidence, description in rows:
        if description:
            out.descriptions[verb] = description
        if tier == "bx" or (tier == "bs" and score >= block_threshold):
            out.blocked.add(verb)
        elif tier == "ls":
            out.learned.append(Hit(verb, float(score), text, extra, float(confidence)))
        elif tier == "cs":
            out.catalogue.append(Hit(verb, float(score), text, None))
        elif tier == "ev":
            out.evidence.append((verb, float(score), float(confidence)))
        elif tier == "px":
            out.phrases.append((verb, text, "exact"))
        elif tier == "ps" and min(len(extra), len(normalized)) >= 4:
            out.phrases.append((verb, text, "substring"))
    out.learned.sort(key=lambda h: -h.similarity)
    out.catalogue.sort(key=lambda h: -h.similarity)
    return out


def unexpired_blocks() -> QuerySet[PhraseBlock]:
    """Blocks in force now, in every scope."""
    return PhraseBlock.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def active_blocks(*, user_id: str | None) -> QuerySet[PhraseBlock]:
    """Blocks in force now for this user: global ones and the user's own."""
    return unexpired_blocks().filter(scope_q(user_id))


_VERB_DETAILS: dict[str, tuple[float, dict]] = {}


def verb_details(names: list[str]) -> dict[str, dict]:
    """Description, display name and one example phrase per verb (for ambiguity options).

    Kept per process for VERB_DETAILS_CACHE_S seconds: options are shown on many answers and the
    catalogue changes rarely, so an edit shows up in options within that time."""
    now = time.monotonic()
    out = {n: hit[1] for n in names if (hit := _VERB_DETAILS.get(n)) and hit[0] > now}
    missing = [n for n in names if n not in out]
    if missing:
        verbs = {v.name: v for v in Verb.objects.filter(name__in=missing)}
        examples: dict[str, str] = {}
        rows = VerbPhrase.objects.filter(verb__name__in=missing).order_by("verb__name", "id").values_list("verb__name", "text")
        for verb, text in rows:
            examples.setdefault(verb, text)
        expires = now + settings.VERB_DETAILS_CACHE_S
        for n, v in verbs.items():
            out[n] = {"description": v.description, "display_name": v.label, "example": examples.get(n, "")}
            _VERB_DETAILS[n] = (expires, out[n])
    return out


def verb_details_forget() -> None:
    """Drop this process's cached verb details (after the catalogue changed)."""
    _VERB_DETAILS.clear()


STATS_RANGES = {"day": timedelta(days=1), "week": timedelta(weeks=1), "month": timedelta(days=30), "all": None}


def correction_decay_targets(
    *, vector: np.ndarray, model: str, user_id: str, verb: Verb, exclude_normalized: str, threshold: float, k: int = 20
) -> list[int]:
    """The user's own active phrases for ``verb`` that match the vector within ``threshold`` (semantic anchors)."""
    rows = (
        LearnedPhrase.objects.filter(user_id=user_id, verb=verb, is_active=True, embedding_model=model)
        .exclude(normalized=exclude_normalized)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values_list("pk", "distance")[:k]
    )
    return [pk for pk, d in rows if 1.0 - d >= threshold]


def candidate_list(
    *,
    status: str | None = None,
    candidate_type: str | None = None,
    min_occurrences: int | None = None,
    risk_level: str | None = None,
    user_id: str | None = None,
) -> QuerySet[LearningCandidate]:
    """Candidates, pending first, then by occurrences and recency."""
    qs = LearningCandidate.objects.all()
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
    limit = limit or settings.LEARNING_STATS_TOP_PENDING
    return list(
        LearningCandidate.objects.filter(status=LearningCandidate.Status.PENDING).order_by(
            "-occurrence_count", "-last_seen_at", "-pk"
        )[:limit]
    )


def learning_stats(*, time_range: str = "week") -> dict:
    """Counts for reviewers: candidates by status (created within the range), active learnings, top pending phrases."""
    since = None
    if STATS_RANGES[time_range] is not None:
        since = timezone.now() - STATS_RANGES[time_range]
    candidates = LearningCandidate.objects.all()
    if since is not None:
        candidates = candidates.filter(created_at__gte=since)
    by_status = {s: 0 for s in LearningCandidate.Status.values}
    by_status.update(dict(candidates.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n")))
    return {
        "time_range": time_range,
        "since": since,
        "candidates_by_status": by_status,
        "candidates_total": sum(by_status.values()),
        "active_learned_phrases": LearnedPhrase.objects.filter(is_active=True).count(),
        "active_aliases": EntityAlias.objects.filter(is_active=True).count(),
        "active_blocklist_entries": unexpired_blocks().count(),
        "top_pending": top_pending_candidates(),
    }


def dashboard_counts() -> dict:
    """The admin index dashboard: what waits for review and what is in force."""
    week_ago = timezone.now() - timedelta(weeks=1)
    return {
        "pending_candidates": LearningCandidate.objects.filter(status=LearningCandidate.Status.PENDING).count(),
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
    qs = qs.filter(user_id=user_id) if user_id else qs.filter(user_id__isnull=True)
    return {row.normalized: row for row in qs.only("pk", "normalized", "verb_id", "is_active", "confidence", "embedding_model")}


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
        rows = [dict(zip(cols, r, strict=False)) for r in cur.fetchall()]
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


_ACTIVE_PROFILE_TTL_S = 10.0
_active_profile_cache: dict[str, tuple[float, dict]] = {}


def active_profile_values(model_name: str) -> dict:
    """{resolve_threshold, margin} of the active fitted profile for the model ({} if none); cached for a few seconds."""
    now = _time.monotonic()
    hit = _active_profile_cache.get(model_name)
    if hit and hit[0] > now:
        return hit[1]
    row = (
        FittedResolutionProfile.objects.filter(embedding_model=model_name, status=FittedResolutionProfile.Status.ACTIVE)
        .values("resolve_threshold", "margin")
        .first()
    )
    values = dict(row) if row else {}
    _active_profile_cache[model_name] = (now + _ACTIVE_PROFILE_TTL_S, values)
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

    learned = list(
        LearnedPhrase.objects.filter(scope_q(user_id), is_active=True, verb__is_active=True, embedding_model=model)
        .exclude(normalized=normalized)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values_list("verb__name", "distance", "confidence")[:k_learned]
    )
    catalogue = list(
        VerbPhrase.objects.filter(verb__is_active=True, embedding_model=model)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values_list("verb__name", "distance")[:k_catalogue]
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
