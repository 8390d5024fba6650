"""Reads for the learning app: catalogue, learned phrases, blocklist, vector searches, candidates,
disambiguations, evidence and fitted profiles.

Vector searches order by pgvector's cosine distance so the HNSW index is used;
connections run with ``hnsw.iterative_scan`` so user and domain filters never
starve a search of results.
"""

import time
import time as _time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone
from pgvector.django import CosineDistance

from common.text import normalize_phrase
from embeddings.embedders import embed_query
from learning import decision
from learning.models import (
    DecisionFit,
    DecisionHead,
    DisambiguationRequest,
    EntityAlias,
    FittedResolutionProfile,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    ResolutionRecord,
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


# --- The learned auto-resolve decision: the fits in force, their heads, the labels ---

_decision_cache: list = [0.0, None]  # [expires (monotonic), state]
_head_cache: "OrderedDict[tuple[int, str | None], tuple]" = OrderedDict()
_HEAD_CACHE_SIZE = 256
_active_verbs_cache: list = [0.0, frozenset()]


@dataclass(frozen=True)
class FitState:
    version: int
    source: str
    params: dict | None


def decision_state() -> dict:
    """{"live", "shadow", "prior"}: FitState or None each (prior: the newest catalogue prior, whatever its status).
    One small query, cached per process for RESOLVE_DECISION_CACHE_S seconds."""
    now = _time.monotonic()
    if _decision_cache[1] is not None and _decision_cache[0] > now:
        return _decision_cache[1]
    rows = list(
        DecisionFit.objects.filter(Q(status__in=[DecisionFit.Status.LIVE, DecisionFit.Status.SHADOW]) | Q(source="prior"))
        .order_by("-version")
        .values("version", "source", "status", "params")[:50]
    )
    state = {"live": None, "shadow": None, "prior": None}
    for r in rows:
        fs = FitState(r["version"], r["source"], r["params"])
        if r["status"] in ("live", "shadow") and state[r["status"]] is None:
            state[r["status"]] = fs
        if r["source"] == DecisionFit.Source.PRIOR and state["prior"] is None:
            state["prior"] = fs
    _decision_cache[:] = [now + settings.RESOLVE_DECISION_CACHE_S, state]
    return state


def decision_cache_clear() -> None:
    _decision_cache[:] = [0.0, None]
    _head_cache.clear()
    _active_verbs_cache[:] = [0.0, frozenset()]


def decision_head(version: int, user_id: str | None) -> tuple | None:
    """(head, verbs, anchors per verb) of fit ``version`` for this user: the user's own head when the fit trained
    one, else the deployment's; None when the fit has no head. Loaded once per process and version (LRU).
    Raises ValueError when the stored head is unreadable."""
    key = (version, user_id)
    if key in _head_cache:
        _head_cache.move_to_end(key)
        return _head_cache[key]
    rows = list(
        DecisionHead.objects.filter(Q(user_id__isnull=True) | Q(user_id=user_id) if user_id else Q(user_id__isnull=True))
        .filter(fit__version=version)
        .order_by(F("user_id").asc(nulls_last=True))
        .values("user_id", "weights", "anchors")[:1]
    )
    value = None
    if rows:
        head, verbs = decision.head_loads(rows[0]["weights"])
        value = (head, verbs, {v: int(n) for v, n in (rows[0]["anchors"] or {}).items()}, rows[0]["user_id"])
    _head_cache[key] = value
    while len(_head_cache) > _HEAD_CACHE_SIZE:
        _head_cache.popitem(last=False)
    return value


def active_verb_names() -> frozenset:
    """Names of the active verbs, cached like the decision state (head-only options must still exist)."""
    now = _time.monotonic()
    if _active_verbs_cache[0] > now:
        return _active_verbs_cache[1]
    names = frozenset(Verb.objects.filter(is_active=True).values_list("name", flat=True))
    _active_verbs_cache[:] = [now + settings.RESOLVE_DECISION_CACHE_S, names]
    return names


def decision_labels(*, window: int) -> list[dict]:
    """The newest ``window`` labelled resolutions that carry features (oldest first)."""
    rows = list(
        ResolutionRecord.objects.filter(label__isnull=False, features__isnull=False)
        .order_by("-labelled_at", "-id")
        .values("features", "features_open", "label", "user_id", "shadow_version", "shadow_outcome", "shadow_label")[:window]
    )
    return rows[::-1]


def labels_since(when) -> int:
    qs = ResolutionRecord.objects.filter(label__isnull=False, features__isnull=False)
    return (qs.filter(labelled_at__gt=when) if when else qs).count()


def shadow_figures(version: int) -> dict:
    """Labels that arrived while fit ``version`` ran in shadow: how its answers would have fared."""
    rows = ResolutionRecord.objects.filter(shadow_version=version, label__isnull=False)
    n = rows.count()
    auto = rows.filter(shadow_outcome="resolved")
    right = auto.filter(shadow_label=True).count()
    wrong = auto.filter(shadow_label=False).count()
    return {"n": n, "right": right, "wrong": wrong, "asked": n - right - wrong}


def decision_anchor_rows(*, model: str, user_id: str | None = None, learned: bool = True):
    """(vectors, verb names, is_learned, trust) of the anchors a head trains on: active catalogue phrases and the
    global learned phrases, plus (``user_id``) that user's own learned phrases only; verbs active only."""
    vectors, names, is_learned, confidence = [], [], [], []
    for verb, emb in VerbPhrase.objects.filter(verb__is_active=True, embedding_model=model, embedding__isnull=False).values_list(
        "verb__name", "embedding"
    ):
        vectors.append(np.asarray(emb, dtype=np.float32))
        names.append(verb)
        is_learned.append(False)
        confidence.append(1.0)
    if learned:
        scope = Q(user_id__isnull=True) | Q(user_id=user_id) if user_id else Q(user_id__isnull=True)
        rows = LearnedPhrase.objects.filter(
            scope, is_active=True, verb__is_active=True, embedding_model=model, embedding__isnull=False
        ).values_list("verb__name", "embedding", "confidence")
        for verb, emb, conf in rows:
            vectors.append(np.asarray(emb, dtype=np.float32))
            names.append(verb)
            is_learned.append(True)
            confidence.append(float(conf))
    return vectors, names, is_learned, confidence


def users_with_phrases(*, model: str, min_phrases: int) -> list[str]:
    """Users with at least ``min_phrases`` active learned phrases of their own (candidates for a personal head)."""
    return list(
        LearnedPhrase.objects.filter(user_id__isnull=False, is_active=True, embedding_model=model)
        .values("user_id")
        .annotate(n=Count("id"))
        .filter(n__gte=min_phrases)
        .order_by("-n")
        .values_list("user_id", flat=True)
    )


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


# Entity aliases: what a name stands for (``big blue`` → ``IBM``), the user's own before global ones.

# Cosine similarity an alias must reach to answer a name it does not spell exactly, per embedding model.
ALIAS_SEMANTIC_THRESHOLDS = {"default": 0.85, "all-MiniLM-L6-v2-onnx-int8": 0.80}


def _alias_match(row: EntityAlias, score: float, match: str) -> dict:
    return {
        "alias": row.alias,
        "canonical_name": row.canonical_name,
        "entity_type": row.entity_type,
        "scope": "user" if row.user_id else "global",
        "user_id": row.user_id,
        "confidence": row.confidence,
        "score": round(float(score), 4),
        "match": match,
    }


def entity_alias_resolve(*, text: str, user_id: str | None = None, entity_type: str | None = None, limit: int = 5) -> dict:
    """What ``text`` names: active aliases spelled the same (normalized), else the nearest ones by vector
    (pgvector, at or above the model's ALIAS_SEMANTIC_THRESHOLDS). A user's alias shadows a global one for
    the same name and entity type. Without a vector (embedder down) only exact matches answer (``degraded``)."""
    normalized = normalize_phrase(text)
    rows = EntityAlias.objects.filter(scope_q(user_id), is_active=True)
    if entity_type:
        rows = rows.filter(entity_type=entity_type)
    exact = sorted(rows.filter(normalized=normalized), key=lambda r: (r.user_id is None, r.pk))
    reason, match = "", "exact"
    hits = [(r, 1.0) for r in exact]
    if not hits:
        match = "semantic"
        vector, model, reason = embed_query(normalized)
        if vector is not None:
            threshold = ALIAS_SEMANTIC_THRESHOLDS.get(model, ALIAS_SEMANTIC_THRESHOLDS["default"])
            near = (
                rows.filter(embedding_model=model)
                .annotate(distance=CosineDistance("embedding", vector))
                .order_by("distance")[: max(limit * 4, 20)]
            )
            hits = sorted(((r, 1.0 - r.distance) for r in near), key=lambda h: (-round(h[1], 4), h[0].user_id is None, h[0].pk))
            hits = [(r, s) for r, s in hits if s >= threshold]
    seen_names: set[tuple[str, str]] = set()
    seen_answers: set[tuple[str, str]] = set()
    matches = []
    for row, score in hits:
        name, answer = (row.normalized, row.entity_type), (row.canonical_name, row.entity_type)
        if name in seen_names or answer in seen_answers:  # shadowed by the user's own alias, or the same answer again
            continue
        seen_names.add(name)
        seen_answers.add(answer)
        matches.append(_alias_match(row, score, match))
    matches = matches[:limit]
    return {
        "text": text,
        "normalized": normalized,
        "outcome": match if matches else "no_match",
        "canonical_name": matches[0]["canonical_name"] if matches else None,
        "entity_type": matches[0]["entity_type"] if matches else None,
        "matches": matches,
        "degraded": bool(reason),
        "degraded_reason": reason,
    }


def verb_catalogue(*, examples: int = 3) -> list[dict]:
    """The active verbs, by domain and name, with display names, descriptions and a few example phrases."""
    verbs = list(Verb.objects.filter(is_active=True).order_by("domain", "name"))
    phrases: dict[int, list[str]] = defaultdict(list)
    for verb_id, text in VerbPhrase.objects.filter(verb__in=verbs).order_by("verb_id", "id").values_list("verb_id", "text"):
        if len(phrases[verb_id]) < examples:
            phrases[verb_id].append(text)
    return [
        {"name": v.name, "domain": v.domain, "display_name": v.label, "description": v.description, "examples": phrases[v.pk]}
        for v in verbs
    ]
