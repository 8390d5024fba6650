"""Reads for memories. Every read is scoped to one user (the commands may search all users).

Vector searches order by pgvector's cosine distance with the user (and other)
filters in the WHERE clause; connections run with ``hnsw.iterative_scan`` on, so
the HNSW scan keeps going until it has found the user's rows instead of coming
back short because of other users' rows.
"""

import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from pgvector.django import CosineDistance

from embeddings.embedders import current_model_name, embed_query
from embeddings.selectors import embedding_rows_needing_work, nearest, scope_is_small
from memories.dedupe import Neighbour
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval, MemoryStatus, QuarantineStatus
from memories.simhash import hamming, to_hex
from tenants.context import acting_agent_id, private_agent_id

LIVE = [MemoryStatus.VERIFIED, MemoryStatus.CANDIDATE]
_STATUS_RANK = {MemoryStatus.VERIFIED: 0, MemoryStatus.CANDIDATE: 1, MemoryStatus.DEPRECATED: 2}


def _owned() -> Q:
    """Rows of the caller's owner: for an agent with private user data its own (``private_agent``), for any other
    caller the shared ones (no private agent's)."""
    private = private_agent_id()
    return Q(private_agent__isnull=True) if private is None else Q(private_agent_id=private)


def memories_readable() -> QuerySet[Memory]:
    """Memories the caller may read, of the tenant's (the manager filters): an agent with private user data only its
    own (``private_agent``), any other caller only the shared ones (no private agent's)."""
    return Memory.objects.filter(_owned())


def memories_of(*, user_id: str, namespace: str | None = None) -> QuerySet[Memory]:
    return memories_readable().filter(user_id=user_id, namespace=namespace or settings.MEMORY_DEFAULT_NAMESPACE)


def memory_get(*, user_id: str, memory_id: int) -> Memory | None:
    """The user's memory, or None (also when it belongs to someone else)."""
    return memories_readable().filter(user_id=user_id, pk=memory_id).first()


def memory_filter_q(filters: dict | None) -> Q:
    """Request filters: type, topic, tags (all must be present), metadata (containment)."""
    q = Q()
    filters = filters or {}
    if filters.get("type"):
        q &= Q(memory_type=filters["type"])
    if filters.get("topic"):
        q &= Q(topic__iexact=filters["topic"])
    if filters.get("tags"):
        q &= Q(tags__contains=list(filters["tags"]))
    if filters.get("metadata"):
        q &= Q(metadata__contains=dict(filters["metadata"]))
    return q


# --- Dedupe neighbours ---


def memory_neighbours(
    *,
    user_id: str,
    namespace: str,
    content_sha256: str,
    simhash: int,
    vector: np.ndarray | None,
    model: str,
    k: int,
    max_distance: int,
) -> list[Neighbour]:
    """The user's live memories that may duplicate a new one: same text, SimHash-near, or nearest by vector."""
    live = memories_of(user_id=user_id, namespace=namespace).filter(status__in=LIVE)
    hex_ = to_hex(simhash)
    fields = ["id", "content", "memory_type", "topic", "content_sha256", "simhash"]
    rows: dict[int, dict] = {}
    for r in live.filter(content_sha256=content_sha256).values(*fields):
        rows[r["id"]] = r
    near = live.extra(
        where=["bit_count(('x' || memories_memory.simhash)::bit(64) # ('x' || %s)::bit(64)) <= %s"],
        params=[hex_, max_distance],
    ).values(*fields)[:50]
    for r in near:
        rows[r["id"]] = r
    similarities: dict[int, float] = {}
    if vector is not None:
        closest = nearest(live.filter(embedding_model=model), vector, k, project=lambda q: q.values(*fields, "distance"))
        for r in closest:
            similarities[r["id"]] = 1.0 - float(r.pop("distance"))
            rows.setdefault(r["id"], r)
        missing = [i for i in rows if i not in similarities]
        if missing:  # exact/SimHash neighbours beyond the k nearest still get their cosine
            for pk, distance in (
                live.filter(pk__in=missing, embedding_model=model)
                .annotate(distance=CosineDistance("embedding", vector))
                .values_list("pk", "distance")
            ):
                similarities[pk] = 1.0 - float(distance)

    return [
        Neighbour(
            id=r["id"],
            content=r["content"],
            memory_type=r["memory_type"],
            topic=r["topic"],
            content_sha256=r["content_sha256"],
            hamming=hamming(r["simhash"], hex_),
            similarity=similarities.get(r["id"]),
        )
        for r in rows.values()
    ]


# --- Retrieval ---


@dataclass
class RetrievedMemory:
    memory: Memory
    score: float | None  # cosine similarity; None in the fallback


def memory_semantic_candidates(
    *,
    user_id: str,
    namespace: str,
    vector: np.ndarray,
    model: str,
    filters: dict | None,
    k: int,
    min_score: float,
    pending: list[Memory] | None = None,
) -> list[RetrievedMemory]:
    """The k nearest verified and the k nearest candidate memories (so a verified one is never crowded out).

    ``pending``: memories whose vector was computed but not stored (for a caller that may only read); they compete
    with that vector, scored here instead of in the database."""
    matching = memories_of(user_id=user_id, namespace=namespace).filter(memory_filter_q(filters))
    unsaved = _pending_matching(matching=matching, model=model, pending=pending)
    base = matching.filter(embedding_model=model).exclude(pk__in=[m.pk for m in unsaved])
    out: list[RetrievedMemory] = []
    # one count for both searches: when the live memories together are few, each status's are (most users)
    small = True if scope_is_small(base.filter(status__in=LIVE)) else None
    for status in LIVE:
        rows = nearest(base.filter(status=status).defer("embedding"), vector, k, small=small)
        scored = [RetrievedMemory(m, 1.0 - float(m.distance)) for m in rows]
        scored += [RetrievedMemory(m, _cosine(m.embedding, vector)) for m in unsaved if m.status == status]
        out.extend(r for r in sorted(scored, key=lambda r: -r.score)[:k] if r.score >= min_score)
    return out


def _pending_matching(*, matching: QuerySet[Memory], model: str, pending: list[Memory] | None) -> list[Memory]:
    """Those of ``pending`` (vectors in memory only) with a vector of ``model`` that are among ``matching``, live."""
    pending = [m for m in pending or [] if m.embedding is not None and m.embedding_model == model]
    if not pending:
        return []
    ok = set(matching.filter(status__in=LIVE, pk__in=[m.pk for m in pending]).values_list("pk", flat=True))
    return [m for m in pending if m.pk in ok]


def _cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def memory_has_embedded(
    *, user_id: str, namespace: str, model: str, filters: dict | None, pending: list[Memory] | None = None
) -> bool:
    """Whether a live memory passing the filters has a vector of ``model``: stored, or in memory (``pending``)."""
    matching = memories_of(user_id=user_id, namespace=namespace).filter(memory_filter_q(filters))
    if _pending_matching(matching=matching, model=model, pending=pending):
        return True
    return matching.filter(status__in=LIVE, embedding_model=model).exists()


def memory_of_another_model_left(*, user_id: str, namespace: str, model: str, filters: dict | None, pending=None) -> bool:
    """Whether a live memory passing the filters still carries another model's vector (after a change of model),
    beside those embedded in memory for this ranking (``pending``): it was not compared with the query."""
    matching = memories_of(user_id=user_id, namespace=namespace).filter(memory_filter_q(filters), status__in=LIVE)
    other = Q(embedding_model__gt="", embedding_model__lt=model) | Q(embedding_model__gt=model)
    return matching.filter(other).exclude(pk__in=[m.pk for m in pending or []]).exists()


def memory_recent_verified(*, user_id: str, namespace: str, filters: dict | None, limit: int) -> list[RetrievedMemory]:
    rows = (
        memories_of(user_id=user_id, namespace=namespace)
        .filter(memory_filter_q(filters), status=MemoryStatus.VERIFIED)
        .defer("embedding")
        .order_by("-updated_at", "-hits", "-id")[:limit]
    )
    return [RetrievedMemory(m, None) for m in rows]


def rank_key(item: RetrievedMemory, decimals: int) -> tuple:
    """status (verified first) > semantic score (rounded, higher first) > recency > hits > id."""
    m = item.memory
    score = round(item.score, decimals) if item.score is not None else 0.0
    updated: datetime = m.updated_at
    return (_STATUS_RANK[m.status], -score, -updated.timestamp(), -m.hits, m.id)


_BLOCK_TAG = re.compile(r"<\s*(/?)\s*learning_memories\s*/?\s*>", re.IGNORECASE)


def bullet(item: RetrievedMemory) -> str:
    m = item.memory
    text = " ".join(m.content.split())
    text = _BLOCK_TAG.sub(lambda m: f"({'/' if m.group(1) else ''}learning_memories)", text)  # any case or spacing
    return f"- [{m.status}/{m.memory_type}] {text}"


OPEN, CLOSE = "<learning_memories>", "</learning_memories>"


def memory_block(items: list[RetrievedMemory], *, max_items: int, max_chars: int) -> tuple[list[RetrievedMemory], str]:
    """Keep ranked items while the whole block (tags included) fits ``max_chars``; answer the kept items and the block.

    An item that does not fit is left out and smaller ones after it may still fit; when even
    the first item does not fit alone it is cut with an ellipsis. No items: an empty block.
    """
    kept, lines = [], []
    budget = max_chars - len(OPEN) - len(CLOSE) - 2  # two line breaks around the bullets
    used = 0
    for item in items:
        if len(kept) >= max_items:
            break
        line = bullet(item)
        cost = len(line) + (1 if lines else 0)
        if used + cost <= budget:
            kept.append(item)
            lines.append(line)
            used += cost
        elif not kept and budget > 10:
            lines.append(line[: budget - 1] + "…")
            kept.append(item)
            used = budget
    if not kept:
        return [], ""
    return kept, OPEN + "\n" + "\n".join(lines) + "\n" + CLOSE


def memory_retrievals_of(*, user_id: str, namespace: str) -> QuerySet[MemoryRetrieval]:
    """The user's retrievals an outcome of the caller may be about: an agent with private user data only its own,
    any other caller only the shared agents' (the owners :func:`memories_readable` reads)."""
    return MemoryRetrieval.objects.filter(_owned(), user_id=user_id, namespace=namespace)


def memory_last_retrieval(*, user_id: str, namespace: str) -> MemoryRetrieval | None:
    return memory_retrievals_of(user_id=user_id, namespace=namespace).order_by("-created_at", "-id").first()


def memory_retrieval_for_outcome(
    *, user_id: str, namespace: str, since: datetime, exclude_query_sha256: str = "", retrieval_id: int | None = None
) -> MemoryRetrieval | None:
    """The retrieval an outcome signal is about, of :func:`memory_retrievals_of`: ``retrieval_id`` when given, else the
    user's latest retrieval since ``since`` that returned memories, leaving out one made for the signal's own text."""
    qs = memory_retrievals_of(user_id=user_id, namespace=namespace)
    if retrieval_id is not None:
        return qs.filter(pk=retrieval_id).first()
    qs = qs.filter(created_at__gte=since).exclude(memory_ids=[])
    if exclude_query_sha256:
        qs = qs.exclude(query_sha256=exclude_query_sha256)
    return qs.order_by("-created_at", "-id").first()


def memory_retrieval_exists(*, user_id: str, namespace: str, retrieval_id: int) -> bool:
    return memory_retrievals_of(user_id=user_id, namespace=namespace).filter(pk=retrieval_id).exists()


def memory_ids_of_user(*, user_id: str, ids: list[int]) -> list[int]:
    """Those of ``ids`` that are memories of this user the caller may read (others, or purged ones, are left out)."""
    return list(memories_readable().filter(user_id=user_id, pk__in=ids).order_by("pk").values_list("pk", flat=True))


def memories_needing_embedding(*, model: str, user_id: str | None = None, namespace: str | None = None) -> QuerySet[Memory]:
    """Memories whose vector is missing, from another model, or from other text."""

    qs = embedding_rows_needing_work(Memory, current_model=model)
    if user_id:
        qs = qs.filter(user_id=user_id)
    if namespace:
        qs = qs.filter(namespace=namespace)
    return qs


VERSION_CHAIN_MAX = 200  # versions read each way; a chain longer than that is cut (and one that loops stops)

_CHAIN_SQL = """
WITH RECURSIVE older(id, next_id, depth) AS (
    SELECT id, supersedes_id, 0 FROM {table} WHERE id = %(id)s
  UNION ALL
    SELECT m.id, m.supersedes_id, o.depth - 1 FROM {table} m JOIN older o ON m.id = o.next_id WHERE o.depth > -%(max)s
), newer(id, depth) AS (
    SELECT id, 0 FROM {table} WHERE id = %(id)s
  UNION ALL
    SELECT (SELECT m.id FROM {table} m WHERE m.supersedes_id = n.id AND m.user_id = %(user)s ORDER BY m.id LIMIT 1),
           n.depth + 1
      FROM newer n WHERE n.id IS NOT NULL AND n.depth < %(max)s
)
SELECT id, depth FROM older UNION ALL SELECT id, depth FROM newer WHERE id IS NOT NULL AND depth > 0
"""


def memory_version_chain(*, memory: Memory) -> list[Memory]:
    """Oldest first: the versions this memory superseded, itself, and the versions that superseded it (the user's
    own). Two queries whatever its length: the chain's ids (one recursive statement), then its rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            _CHAIN_SQL.format(table=connection.ops.quote_name(Memory._meta.db_table)),
            {"id": memory.pk, "user": memory.user_id, "max": VERSION_CHAIN_MAX},
        )
        steps = cursor.fetchall()
    older = sorted((step for step in steps if step[1] <= 0), key=lambda step: -step[1])  # the memory first, outward
    newer = sorted((step for step in steps if step[1] > 0), key=lambda step: step[1])
    ids, seen = [], set()
    for direction in (older, newer):
        for pk, depth in direction:
            if pk in seen:  # a version seen already closes a loop: the chain stops there
                break
            seen.add(pk)
            ids.append((depth, pk))
    rows = Memory.objects.in_bulk([pk for _, pk in ids])
    return [rows[pk] for _, pk in sorted(ids) if pk in rows]


# --- Search (API and the search_memories command) ---


@dataclass
class SearchHit:
    memory: Memory
    semantic: float | None
    substring: bool

    @property
    def score(self) -> float:
        """Cosine similarity, plus 0.25 when the query appears literally in the content or topic."""
        return (self.semantic or 0.0) + (0.25 if self.substring else 0.0)

    @property
    def matched_by(self) -> str:
        if self.semantic is not None and self.substring:
            return "both"
        return "substring" if self.substring else "semantic"


def memory_search(
    *,
    query: str,
    user_id: str | None,
    vector: np.ndarray | None,
    model: str,
    semantic: bool,
    substring: bool,
    namespace: str | None = None,
    include_deprecated: bool = False,
    filters: dict | None = None,
    limit: int = 20,
    min_score: float = 0.0,
) -> list[SearchHit]:
    """Semantic and/or substring search, deduplicated by memory, ranked by :attr:`SearchHit.score`.

    ``user_id`` None searches every user (operator commands only; the API always passes one). Without an acting
    agent (an operator's command) every owner's memories are searched, private agents' too.
    """
    qs = (Memory.objects.all() if acting_agent_id() is None else memories_readable()).filter(memory_filter_q(filters))
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    if namespace:
        qs = qs.filter(namespace=namespace)
    if not include_deprecated:
        qs = qs.filter(status__in=LIVE)
    hits: dict[int, SearchHit] = {}
    if semantic and vector is not None:
        rows = nearest(qs.filter(embedding_model=model), vector, limit)
        for m in rows:
            sim = 1.0 - float(m.distance)
            if sim >= min_score:
                hits[m.pk] = SearchHit(m, sim, False)
    if substring:
        needle = query.strip()
        rows = qs.filter(Q(content__icontains=needle) | Q(topic__icontains=needle))
        if vector is not None:
            rows = rows.annotate(distance=CosineDistance("embedding", vector))
        rows = rows.order_by("-updated_at", "-id")[:limit]
        for m in rows:
            if m.pk in hits:
                hits[m.pk].substring = True
            else:
                distance = getattr(m, "distance", None)
                sim = None if distance is None or m.embedding_model != model else 1.0 - float(distance)
                hits[m.pk] = SearchHit(m, sim if semantic else None, True)
    ranked = sorted(
        hits.values(), key=lambda h: (-h.score, _STATUS_RANK[h.memory.status], -h.memory.updated_at.timestamp(), h.memory.pk)
    )
    return ranked[:limit]


def memory_search_text(
    *,
    query: str,
    user_id: str | None,
    mode: str = "both",
    limit: int = 10,
    include_deprecated: bool = False,
    filters: dict | None = None,
    namespace: str | None = None,
) -> tuple[list[SearchHit], str]:
    """Embed the query (when semantic) and search; answers the hits and a degraded reason
    ("embedder_unavailable" when only the substring search could run, "" otherwise)."""

    semantic = mode in ("both", "semantic")
    substring = mode in ("both", "substring")
    vector, model, reason = None, current_model_name(), ""
    if semantic:
        vector, model, _ = embed_query(query)  # bounded; None when the embedder is down
        if vector is None:
            reason = "embedder_unavailable"
            if not substring:
                return [], reason
    filters = dict(filters or {})
    namespace = filters.pop("namespace", None) or namespace
    hits = memory_search(
        query=query,
        user_id=user_id,
        vector=vector,
        model=model,
        semantic=semantic,
        substring=substring,
        namespace=namespace,
        include_deprecated=include_deprecated,
        filters=filters,
        limit=limit,
    )
    return hits, reason


# --- The review inbox ---


def quarantine_waiting() -> QuerySet[MemoryQuarantine]:
    return MemoryQuarantine.objects.filter(status=QuarantineStatus.PENDING)


def quarantine_by_ids(ids: list[int]) -> QuerySet[MemoryQuarantine]:
    return MemoryQuarantine.objects.filter(pk__in=ids)
