"""Reads on the resolve path: exact learned phrases, the tier query (vector neighbours, blocks, catalogue
phrases, evidence), blocks in force and verb details.

Vector searches order by pgvector's cosine distance so the HNSW index is used; connections run with
``hnsw.iterative_scan`` so user and domain filters never starve a search of results."""

import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone
from pgvector.django import CosineDistance

from common.db import VectorParam, rows_fetch
from embeddings.selectors import other_model_rows_left
from learning.models import (
    LearnedPhrase,
    PhraseBlock,
    PhraseEvidence,
    Verb,
    VerbPhrase,
    verb_label,
)
from learning.selectors.indexes import learned_tenant_indexes
from tenants.context import private_agent_id, tenant_filter_ids


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


class ExactHits(list):
    """``learned_exact``'s hits, with the catalogue stamp read by the same statement (``catalogue_stamp``) and
    whether the user's own learned phrases, the global ones, and the evidence rows of the query's scope are few
    enough to compare exactly (``tier_rows``'s ``own_exact``, ``global_exact`` and ``evidence_exact``)."""

    stamp: tuple | None = None
    own_exact: bool = False
    global_exact: bool = False
    evidence_exact: bool = False
    # the asking user has an active learned phrase of their own in the query's scope (a verb in force, of the
    # domain asked about, seen by the acting agent): not a newcomer (decision feature ``user_has_taught``)
    taught: bool = False


def _tenant_literal(tenants) -> str:
    """The tenants in scope as a literal array (a prepared statement's plan then knows them)."""
    return "'{" + ",".join(str(int(t)) for t in tenants) + "}'::bigint[]"


# Global learned phrases compared exactly while they are at most this many (well above the 20 neighbours the resolver
# asks for by default): a walk of so few comes back short, and reading 101 index entries to know costs next to nothing.
GLOBAL_EXACT_MAX_PHRASES = 100


def learned_exact(*, normalized: str, user_id: str | None, domain: str | None) -> ExactHits:
    """Exact learned matches, the user's first, then global; in one query, on the resolve hot path. The same
    statement reads the catalogue stamp (``catalogue_stamp``), which the tier query needs next, and counts the
    user's learned phrases up to ``RESOLVE_USER_EXACT_MAX_PHRASES`` + 1 and the global ones up to
    ``GLOBAL_EXACT_MAX_PHRASES`` + 1 (every row in scope, through the (tenant, user) b-tree), and the feedback
    evidence of the query's scope (the user's, or the global rows, of the acting agent's kind) up to
    ``RESOLVE_USER_EXACT_MAX_PHRASES`` + 1 (through its (tenant, user, private agent) b-tree), and whether the user
    has taught a phrase of their own in the query's scope (``ExactHits.taught``): one round trip."""
    params = {
        "n": normalized,
        "u": user_id,
        "now": timezone.now(),
        "d": domain,
        "t": None if tenant_filter_ids() is None else list(tenant_filter_ids()),
        "pa": private_agent_id(),
    }
    exact_max = settings.RESOLVE_USER_EXACT_MAX_PHRASES
    in_tenant = "" if params["t"] is None else " AND o.tenant_id = ANY(%(t)s::bigint[])"

    def count(who: str, limit: int, table: str = LearnedPhrase._meta.db_table) -> str:
        if limit <= 0:
            return "NULL::bigint"
        return f"(SELECT count(*) FROM (SELECT 1 FROM {table} o WHERE {who}{in_tenant} LIMIT {int(limit) + 1}) c)"

    own = count("o.user_id = %(u)s", exact_max) if user_id is not None else "NULL::bigint"
    global_max = GLOBAL_EXACT_MAX_PHRASES if exact_max > 0 else 0
    # the rows tier_rows' evidence part reads (the scope, the acting agent's kind), of any embedding model: a count
    # too high only walks the index; none when the resolver reads no evidence
    mine = "o.user_id = %(u)s" if user_id else "o.user_id IS NULL"
    evidence_scope = f"{mine} AND o.private_agent_id IS NOT DISTINCT FROM %(pa)s::bigint"
    reads_evidence = settings.RESOLVE_USE_FEEDBACK_PENALTY and settings.FEEDBACK_EVIDENCE_K > 0
    evidence = count(evidence_scope, exact_max if reads_evidence else 0, PhraseEvidence._meta.db_table)
    taught = (
        f"""EXISTS (SELECT 1 FROM {LearnedPhrase._meta.db_table} o JOIN {Verb._meta.db_table} ov ON ov.id = o.verb_id
                   WHERE o.user_id = %(u)s AND o.is_active AND ov.is_active
                     AND o.private_agent_id IS NOT DISTINCT FROM %(pa)s::bigint{in_tenant}{" AND ov.domain = %(d)s" if domain else ""})"""
        if user_id is not None
        else "false"
    )
    sql = f"""
        SELECT s.version, s.n, x.name, x.description, x.confidence, x.user_id, x.phrase, x.blocked, {own},
               {count("o.user_id IS NULL", global_max)}, {evidence}, {taught}
        FROM ({_STAMP_SQL}{" WHERE tenant_id = ANY(%(t)s::bigint[])" if params["t"] is not None else ""}) s
        LEFT JOIN LATERAL (
            SELECT v.name, v.description, t.confidence, t.user_id, t.phrase, t.id,
                   EXISTS (SELECT 1 FROM {PhraseBlock._meta.db_table} b
                           WHERE b.verb_id = t.verb_id AND (b.user_id IS NULL OR b.user_id = %(u)s)
                             AND (b.expires_at IS NULL OR b.expires_at > %(now)s)) AS blocked
            FROM {LearnedPhrase._meta.db_table} t JOIN {Verb._meta.db_table} v ON v.id = t.verb_id
            WHERE t.normalized = %(n)s AND t.is_active AND v.is_active
              AND (t.user_id IS NULL OR (t.user_id = %(u)s AND t.private_agent_id IS NOT DISTINCT FROM %(pa)s::bigint))
              AND (%(t)s::bigint[] IS NULL OR t.tenant_id = ANY(%(t)s::bigint[])){" AND v.domain = %(d)s" if domain else ""}
        ) x ON true
        ORDER BY x.user_id IS NULL, x.id
    """
    with connection.cursor() as cursor:
        rows = rows_fetch(cursor, sql, params, prepared=True)  # planning costs several times its execution
    hits = ExactHits(ExactHit(*row[2:-4]) for row in rows if row[2] is not None)
    hits.stamp = (rows[0][0], rows[0][1])
    own_count, global_count, evidence_count, hits.taught = rows[0][-4:]
    hits.own_exact = own_count is not None and own_count <= exact_max
    hits.global_exact = global_count is not None and global_count <= global_max
    hits.evidence_exact = evidence_count is not None and evidence_count <= exact_max
    return hits


@dataclass(frozen=True)
class CatalogueArrays:
    """The catalogue in scope, in process memory: its phrases (verb, text, normalized) and their unit vectors."""

    verbs: list[str]
    texts: list[str]
    normalized: list[str]
    vectors: np.ndarray  # (phrases with a vector of the model) x d, unit rows
    with_vector: np.ndarray  # indices of those phrases
    details: dict[str, dict]  # verb -> what an option shows (verb_details): description, display name, first phrase

    @property
    def size(self) -> int:
        return len(self.texts)


_CATALOGUES: "OrderedDict[tuple, tuple[tuple, int, CatalogueArrays | None]]" = OrderedDict()  # key -> (stamp, phrases, copy)
_CATALOGUES_LOCK = threading.Lock()  # threaded servers share the cache


def _catalogue_verbs_sql(tenants, domain) -> tuple[str, dict]:
    sql, params = "SELECT id, name, description, display_name FROM learning_verb WHERE is_active", {}
    if tenants is not None:
        sql += " AND tenant_id = ANY(%(tenants)s)"
        params["tenants"] = list(tenants)
    if domain:
        sql += " AND domain = %(domain)s"
        params["domain"] = domain
    return sql, params


_STAMP_SQL = "SELECT coalesce(max(version), 0) AS version, count(*) AS n FROM learning_cataloguestamp"


def catalogue_stamp(tenants) -> tuple:
    """(newest version, tenants with a version) of the catalogues in scope (``learning/triggers.py``): it changes
    with every edit of a verb or a catalogue phrase in scope, committed by any process."""
    sql, params = _STAMP_SQL, {}
    if tenants is not None:
        sql += " WHERE tenant_id = ANY(%(tenants)s)"
        params["tenants"] = list(tenants)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return tuple(cursor.fetchone())


def catalogue_arrays(*, domain: str | None, model: str, stamp: tuple | None = None) -> CatalogueArrays | None:
    """The catalogue in scope (active verbs of the caller's tenants, ``domain``) from a per-process cache that one
    small query validates on every call (``catalogue_stamp``), so an edit in any process shows up at once. None
    when the catalogue is larger than ``RESOLVE_CATALOGUE_CACHE_PHRASES`` (the tier query then reads it in
    PostgreSQL). ``stamp``: read already in this transaction (``learned_exact``)."""
    tenants = tenant_filter_ids()
    stamp = catalogue_stamp(tenants) if stamp is None else stamp
    key = (tenants, domain, model)
    with _CATALOGUES_LOCK:
        hit = _CATALOGUES.get(key)
        if hit is not None and hit[0] == stamp and (hit[1] <= settings.RESOLVE_CATALOGUE_CACHE_PHRASES) == (hit[2] is not None):
            _CATALOGUES.move_to_end(key)
            return hit[2]
    # Read after the stamp: a copy is never older than the stamp it is kept under (an edit committed in between
    # only makes the next call read again).
    verbs_sql, params = _catalogue_verbs_sql(tenants, domain)
    params["m"] = model
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH v AS MATERIALIZED ({verbs_sql}) SELECT count(*) FROM learning_verbphrase t WHERE t.verb_id IN (SELECT id FROM v)",
            params,
        )
        rows, count = None, cursor.fetchone()[0]
        if count <= settings.RESOLVE_CATALOGUE_CACHE_PHRASES:
            cursor.execute(
                f"WITH v AS MATERIALIZED ({verbs_sql}) SELECT v.name, v.description, t.text, t.normalized, "
                "CASE WHEN t.embedding_model = %(m)s THEN t.embedding END, v.display_name "
                "FROM learning_verbphrase t JOIN v ON v.id = t.verb_id "
                "ORDER BY t.id",
                params,
            )
            rows = cursor.fetchall()
    arrays = None if rows is None else _arrays(rows)
    with _CATALOGUES_LOCK:
        _CATALOGUES[key] = (stamp, count, arrays)
        while (
            len(_CATALOGUES) > 1
            and sum(a.size for _, _, a in _CATALOGUES.values() if a) > settings.RESOLVE_CATALOGUE_CACHE_PHRASES
        ):
            _CATALOGUES.popitem(last=False)
    return arrays


def _arrays(rows) -> CatalogueArrays:
    vectors = [_vector(r[4]) for r in rows if r[4] is not None]
    matrix = np.vstack(vectors) if vectors else np.zeros((0, 1), dtype=np.float32)
    if len(matrix):
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    details: dict[str, dict] = {}
    for name, description, text, _, _, display_name in rows:  # phrases in id order: the first is the example
        details.setdefault(name, {"description": description, "display_name": verb_label(name, display_name), "example": text})
    return CatalogueArrays(
        verbs=[r[0] for r in rows],
        texts=[r[2] for r in rows],
        normalized=[r[3] for r in rows],
        vectors=matrix,
        with_vector=np.array([i for i, r in enumerate(rows) if r[4] is not None], dtype=np.int64),
        details=details,
    )


def _vector(value) -> np.ndarray:
    """A vector column as a raw cursor answers it: pgvector's text form, or an array where an adapter is registered."""
    if isinstance(value, str):
        return np.array(value.strip("[]").split(","), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def _catalogue_rows(arrays: CatalogueArrays, normalized: str, vector, k: int) -> list[tuple]:
    """The catalogue tiers' rows, as the tier query answers them: phrases equal to the text ('px'), contained in it
    or containing it ('ps'), and the ``k`` nearest by cosine ('cs')."""
    rows = []
    for verb, text, norm in zip(arrays.verbs, arrays.texts, arrays.normalized, strict=True):
        if norm == normalized:
            rows.append(("px", verb, 1.0, text, norm, 1.0, arrays.details[verb]["description"]))
        elif norm in normalized or normalized in norm:
            rows.append(("ps", verb, 1.0, text, norm, 1.0, arrays.details[verb]["description"]))
    if vector is not None and len(arrays.with_vector):
        q = np.asarray(vector, dtype=np.float32)
        # capped at 1, as PostgreSQL's 1 - cosine distance: float rounding never lifts a neighbour above an equal text
        sims = np.minimum((arrays.vectors @ (q / max(float(np.linalg.norm(q)), 1e-12))).astype(np.float64), 1.0)
        top = np.argsort(-sims, kind="stable")[:k]
        for j in top:
            i = int(arrays.with_vector[j])
            verb = arrays.verbs[i]
            rows.append(("cs", verb, float(sims[j]), arrays.texts[i], None, 1.0, arrays.details[verb]["description"]))
    return rows


_OWN_INDEX: list = [0.0, frozenset()]  # [expires (monotonic), tenants with a valid partial HNSW index of their own]


def tenants_with_own_index() -> frozenset:
    """Tenants whose learned phrases have a partial HNSW index of their own (learning.services.indexes); cached
    per process for VERB_DETAILS_CACHE_S."""
    now = time.monotonic()
    if _OWN_INDEX[0] > now:
        return _OWN_INDEX[1]
    own = frozenset(t for t, valid in learned_tenant_indexes().items() if valid)
    _OWN_INDEX[:] = [now + settings.VERB_DETAILS_CACHE_S, own]
    return own


def tenants_with_own_index_forget() -> None:
    """Drop this process's cached answer (after this process changed the indexes)."""
    _OWN_INDEX[:] = [0.0, frozenset()]


@dataclass
class TierRows:
    learned: list[Hit]
    blocked: set[str]
    phrases: list[tuple[str, str, str]]
    catalogue: list[Hit]
    descriptions: dict[str, str]
    evidence: list[tuple[str, float, float]]  # (verb, similarity, negative - positive) near the query
    details: dict[str, dict] = field(default_factory=dict)  # verb_details of the catalogue in scope, when in memory
    # verbs blocked outright by a block that cannot be compared with the text (no vector of the text's model yet)
    unchecked: set[str] = field(default_factory=set)
    stamp: tuple | None = None  # the catalogue stamp read with these rows (``catalogue_stamp``), when it was


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
    stamp: tuple | None = None,
    own_exact: bool = False,
    global_exact: bool = False,
    evidence_exact: bool = False,
) -> TierRows:
    """Tiers 3-7 of resolution in ONE round trip: learned neighbours, blocked verbs, catalogue phrase
    matches and catalogue neighbours, and (``k_evidence`` > 0) the user's feedback evidence within
    ``evidence_similarity`` of the query. Each vector part orders by cosine distance so its HNSW index
    is used. Without a vector, only the text parts run (degraded mode).

    Learned neighbours: the global phrases walk their own HNSW index (``learnedphrase_global_hnsw``), or with
    ``global_exact`` (few of them) are compared exactly, and, with ``own_exact`` (the user has few phrases;
    ``learned_exact`` counted both), the user's phrases are compared exactly through their b-tree; the nearest
    ``k_learned`` of both are kept. One walk of the index over every phrase would skip every other user's phrases
    on its way (with 1,000 users, most of what it reads). A user with many phrases, and a tenant with an index of
    its own, walk that index with the filter, as one part.

    Evidence: with ``evidence_exact`` (few rows in the query's scope; ``learned_exact`` counted them) compared
    exactly through its (tenant, user, private agent) b-tree, else its HNSW index is walked with the filter. The
    statement is prepared, and a generic plan cannot tell a user with no evidence from one with much: it walked the
    index for both, reading up to ``hnsw.max_scan_tuples`` entries for a user with none (5 ms of a resolve)."""
    tenants = tenant_filter_ids()
    params: dict = {"n": normalized, "u": user_id, "m": model, "now": timezone.now()}
    verbs = "SELECT id, name, description FROM learning_verb WHERE is_active"
    # The tenant in scope, also inside each ordered scan so other tenants' rows never take a neighbour's place
    # (row-level security filters the same way; this is the app's own filter). A literal: the statement is
    # prepared, and a tenant's partial HNSW index serves it only when the plan knows the tenant.
    in_tenant = ""
    if tenants is not None:
        ids = _tenant_literal(tenants)
        verbs += f" AND tenant_id = ANY({ids})"
        in_tenant = f" AND t.tenant_id = ANY({ids})"
    if domain:
        verbs += " AND domain = %(domain)s"
        params["domain"] = domain
    scope = "(t.user_id IS NULL OR t.user_id = %(u)s)"
    # a user's phrases of the agent's kind: an agent with private user data reads its own, the others the shared ones
    own_scope = "t.user_id = %(u)s AND t.private_agent_id IS NULL"
    if private_agent_id() is not None:
        params["pa"] = private_agent_id()
        own_scope = "t.user_id = %(u)s AND t.private_agent_id = %(pa)s"
    learned_scope = f"(t.user_id IS NULL OR ({own_scope}))"
    # With a domain, filter inside the ordered scans (iterative index scans keep them from starving).
    in_domain = " AND t.verb_id = ANY(ARRAY(SELECT id FROM v))" if domain else ""
    # The catalogue (text and vector tiers) from process memory when it is small enough, else in the query.
    catalogue = catalogue_arrays(domain=domain, model=model, stamp=stamp)
    in_force = f"{scope} AND (t.expires_at IS NULL OR t.expires_at > %(now)s)"
    # A block that cannot be compared with the text blocks its verb outright: every block when the text has no
    # vector (the embedder is down), else one without a vector of the text's model (not embedded yet, or another model).
    uncompared = "" if vector is None else " AND (t.embedding IS NULL OR t.embedding_model <> %(m)s)"
    parts = [
        # blocklist, exact text
        f"SELECT 'bx', v.name, 1.0::float8, t.phrase, NULL, 1.0::float8, '' FROM learning_phraseblock t "
        f"JOIN v ON v.id = t.verb_id WHERE t.normalized = %(n)s AND {in_force}",
        f"SELECT 'bu', v.name, 1.0::float8, t.phrase, NULL, 1.0::float8, '' FROM learning_phraseblock t "
        f"JOIN v ON v.id = t.verb_id WHERE {in_force}{uncompared}",
    ]
    if catalogue is None:
        # catalogue phrases: equal to the text, contained in it, or containing it
        parts.append(
            "SELECT CASE WHEN t.normalized = %(n)s THEN 'px' ELSE 'ps' END, v.name, 1.0::float8, t.text, t.normalized, 1.0::float8, v.description "
            "FROM learning_verbphrase t JOIN v ON v.id = t.verb_id "
            # strpos, not LIKE: '_' and '%' in the text are plain characters, as in the in-memory comparison
            "WHERE strpos(%(n)s, t.normalized) > 0 OR strpos(t.normalized, %(n)s) > 0"
        )

    # A tenant with its own HNSW index walks it: PostgreSQL would rather read and sort the tenant's rows in scope (it
    # costs a vector distance like any operator), 5 ms for 1,200 rows where the walk takes about 1 ms.
    walk_own = (
        vector is not None and learned and tenants is not None and len(tenants) == 1 and tenants[0] in tenants_with_own_index()
    )
    # The global phrases apart from the user's (see the docstring): 'ls' the walked part ('lg' when the global
    # phrases are compared exactly), 'lu' the user's, exact.
    split = not walk_own and (user_id is None or own_exact)
    exact_order = "(t.embedding <=> (SELECT v FROM q)) + 0"

    def learned_part(tag: str, where: str, order: str) -> str:
        return (
            f"SELECT '{tag}', v.name, 1.0 - x.d, x.phrase, x.user_id, x.confidence, v.description FROM ("
            f"SELECT t.verb_id, t.phrase, t.user_id, t.confidence, t.embedding <=> (SELECT v FROM q) AS d "
            f"FROM learning_learnedphrase t WHERE t.is_active AND {where} AND t.embedding_model = %(m)s{in_domain}{in_tenant} "
            f"ORDER BY {order} LIMIT {int(k_learned)}) x JOIN v ON v.id = x.verb_id"
        )

    def vector_parts(order: str, own: bool = True) -> list[tuple[str, str]]:
        """The vector tiers as (tag, statement), each ordered by ``order``: ``d`` uses the HNSW indexes; the distance
        ``+ 0`` is no indexed ordering, so the rows in scope are scanned exactly. ``own``: with the user's part
        (when split)."""
        out: list[tuple[str, str]] = []
        if learned and not split:
            out.append(("ls", learned_part("ls", learned_scope, order)))
        elif learned and global_exact:
            out.append(("lg", learned_part("lg", "t.user_id IS NULL", exact_order)))
        elif learned:
            out.append(("ls", learned_part("ls", "t.user_id IS NULL", order)))
        if learned and split and own and user_id is not None:
            out.append(("lu", learned_part("lu", own_scope, exact_order)))
        out.append(  # blocks of verbs in scope only, filtered inside the scan: others take no place among the k
            (
                "bs",
                "SELECT 'bs', v.name, 1.0 - x.d, x.phrase, NULL, 1.0::float8, '' FROM ("
                f"SELECT t.verb_id, t.phrase, t.embedding <=> (SELECT v FROM q) AS d FROM learning_phraseblock t "
                f"WHERE {in_force} AND t.embedding_model = %(m)s AND t.verb_id = ANY(ARRAY(SELECT id FROM v)){in_tenant} "
                f"ORDER BY {order} LIMIT {int(k_blocks)}) x JOIN v ON v.id = x.verb_id",
            )
        )
        if k_evidence:
            # Evidence is kept per scope: the user's own, or global rows for global resolution.
            mine = "t.user_id = %(u)s" if user_id else "t.user_id IS NULL"
            # an agent with private user data reads its own evidence only, and the others never read it
            mine += " AND t.private_agent_id = %(pa)s" if private_agent_id() is not None else " AND t.private_agent_id IS NULL"
            params.update(de=1.0 - evidence_similarity)
            out.append(
                (
                    "ev",
                    "SELECT 'ev', x.verb, 1.0 - x.d, '', NULL, x.net, '' FROM ("
                    f"SELECT t.verb, t.negative - t.positive AS net, t.embedding <=> (SELECT v FROM q) AS d FROM {PhraseEvidence._meta.db_table} t "
                    f"WHERE {mine} AND t.embedding_model = %(m)s{in_tenant} "
                    f"ORDER BY {exact_order if evidence_exact else order} LIMIT {int(k_evidence)}) x WHERE x.d <= %(de)s",
                )
            )
        if catalogue is None:
            out.append(
                (
                    "cs",
                    "SELECT 'cs', v.name, 1.0 - x.d, x.text, NULL, 1.0::float8, v.description FROM ("
                    "SELECT t.verb_id, t.text, t.embedding <=> (SELECT v FROM q) AS d FROM learning_verbphrase t "
                    f"WHERE t.embedding_model = %(m)s{in_domain}{in_tenant} ORDER BY {order} LIMIT {int(k_catalogue)}) x JOIN v ON v.id = x.verb_id",
                )
            )
        return out

    if vector is not None:
        # The vector travels once, as an InitPlan parameter ((SELECT v FROM q)): the HNSW scans still use it as
        # their ordering key, and the server parses 384 floats once instead of once per tier.
        params.update(q=VectorParam(vector))
        walked = vector_parts("d")
        parts += [sql for _, sql in walked]
    ctes = f"v AS MATERIALIZED ({verbs})" + (", q AS (SELECT %(q)s::vector AS v)" if vector is not None else "")
    out = TierRows([], set(), [], [], {}, [], stamp=stamp)
    sort_off = ("SET LOCAL enable_sort = off",) if walk_own else ()
    sort_on = ("SET LOCAL enable_sort = on",) if walk_own else ()
    with connection.cursor() as cursor:
        statement = f"WITH {ctes} " + " UNION ALL ".join(f"({p})" for p in parts)
        rows = rows_fetch(cursor, statement, params, before=sort_off, after=sort_on, prepared=True)
        if vector is not None:
            found = Counter(r[0] for r in rows)
            tags = {tag for tag, _ in walked}
            short = {tag for tag, k in (("ls", k_learned), ("cs", k_catalogue)) if tag in tags and found[tag] < k}
            if short:
                # An index scan came back short: fewer rows in scope, or a graph crowded with identical vectors
                # (embeddings.selectors.nearest). That tier again, exactly, over the rows in scope.
                exact = rows_fetch(
                    cursor,
                    f"WITH {ctes} "
                    + " UNION ALL ".join(f"({sql})" for tag, sql in vector_parts(exact_order, own=False) if tag in short),
                    params,
                )
                rows = [r for r in rows if r[0] not in short] + exact
            near_blocks = [r for r in rows if r[0] == "bs"]
            if len(near_blocks) >= k_blocks and min(r[2] for r in near_blocks) >= block_threshold:
                # every one of the k nearest blocks applies: there may be more; all of those that apply, exactly
                params.update(bd=1.0 - block_threshold)
                rows += rows_fetch(
                    cursor,
                    f"WITH {ctes} SELECT 'bs', v.name, 1.0 - (t.embedding <=> (SELECT v FROM q)), t.phrase, NULL, "
                    f"1.0::float8, '' FROM learning_phraseblock t JOIN v ON v.id = t.verb_id WHERE {in_force} "
                    f"AND t.embedding_model = %(m)s{in_tenant} AND t.embedding <=> (SELECT v FROM q) <= %(bd)s",
                    params,
                )
    if catalogue is not None:
        rows = rows + _catalogue_rows(catalogue, normalized, vector, k_catalogue)
        out.details = catalogue.details
    for tier, verb, score, text, extra, confidence, description in rows:
        if description:
            out.descriptions[verb] = description
        if score != score:  # NaN: a stored vector with no direction (zero) compares with nothing
            if tier != "bs":
                continue
            tier = "bu"  # a block that cannot be compared blocks its verb outright
        if tier == "bu":
            out.blocked.add(verb)
            out.unchecked.add(verb)
        elif tier == "bx" or (tier == "bs" and score >= block_threshold):
            out.blocked.add(verb)
        elif tier in ("ls", "lg", "lu"):
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
    del out.learned[k_learned:]  # a split's two parts: the nearest of both
    out.catalogue.sort(key=lambda h: -h.similarity)
    return out


def vectors_of_another_model_left(model: str, *, fresh: bool = False) -> bool:
    """Whether catalogue phrases, learned phrases or blocks in scope still carry vectors of another embedding model
    than the query's (after a change of model, until the backfill embeds them again): the vector tiers do not
    compare them, and an answer should say so. ``fresh``: not what this process saw a few seconds ago."""
    return other_model_rows_left([PhraseBlock, VerbPhrase, LearnedPhrase], current_model=model, fresh=fresh)


def unexpired_blocks() -> QuerySet[PhraseBlock]:
    """Blocks in force now, in every scope."""
    return PhraseBlock.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def active_blocks(*, user_id: str | None) -> QuerySet[PhraseBlock]:
    """Blocks in force now for this user: global ones and the user's own."""
    return unexpired_blocks().filter(scope_q(user_id))


def block_applying(
    *, normalized: str, verb, user_id: str | None, vector, model: str, threshold: float, comparable_only: bool = False
) -> PhraseBlock | None:
    """The block in force in the user's scope that forbids ``verb`` for this text, as the resolver applies blocks:
    one on the text itself, or on a paraphrase (cosine >= ``threshold`` with the text's ``vector``). A block that
    cannot be compared (no vector for the text, or none of ``model`` for the block) answers too: what cannot be
    checked against a block is not learned; with ``comparable_only`` it does not."""
    blocks = active_blocks(user_id=user_id).filter(verb=verb)
    if not blocks.exists():  # as a rule: one statement for a write that no block concerns
        return None
    same_text = blocks.filter(normalized=normalized).first()
    if same_text is not None:
        return same_text
    if vector is None:
        return None if comparable_only else blocks.first()
    unchecked = Q(embedding__isnull=True) | ~Q(embedding_model=model)
    if comparable_only:
        blocks = blocks.exclude(unchecked)
    elif (first_unchecked := blocks.filter(unchecked).first()) is not None:
        return first_unchecked
    return (
        blocks.annotate(distance=CosineDistance("embedding", vector))
        .filter(distance__lte=1.0 - threshold)
        .order_by("distance")
        .first()
    )


_VERB_DETAILS: dict[tuple, tuple[float, dict]] = {}  # (tenants in scope, verb name) -> (expiry, details)


def verb_details(names: list[str], known: dict[str, dict] | None = None) -> dict[str, dict]:
    """Description, display name and one example phrase per verb (for ambiguity options).

    ``known``: the details of the catalogue in scope kept in memory (``TierRows.details``), current on this
    resolve; otherwise kept per process for VERB_DETAILS_CACHE_S seconds: options are shown on many answers and
    the catalogue changes rarely, so an edit shows up in options within that time."""
    if known and all(n in known for n in names):
        return {n: known[n] for n in names}
    now = time.monotonic()
    tenants = tenant_filter_ids()
    out = {n: hit[1] for n in names if (hit := _VERB_DETAILS.get((tenants, n))) and hit[0] > now}
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
            _VERB_DETAILS[(tenants, n)] = (expires, out[n])
    return out


def verb_details_forget() -> None:
    """Drop this process's cached verb details (after the catalogue changed)."""
    _VERB_DETAILS.clear()
