"""Retrieve: the user's best memories for a query, with hits, streaks, auto-promotion and the retrieval log."""

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from common.db import ASYNC_COMMIT
from common.text import text_hash
from embeddings.embedders import embed_query
from embeddings.selectors import other_model_rows_left
from embeddings.services import embedding_assign, embeddings_compute, embeddings_refresh
from memories.models import Memory, MemoryRetrieval
from memories.selectors import (
    LIVE,
    RetrievedMemory,
    memories_of,
    memories_readable,
    memory_block,
    memory_has_embedded,
    memory_of_another_model_left,
    memory_recent_verified,
    memory_semantic_candidates,
    rank_key,
)
from memories.services.shared import embedding_schedule, memories_auto_promote, namespace_or_default, user_scopes_lock
from tenants.context import private_agent_id


@dataclass
class RetrieveResult:
    items: list[RetrievedMemory]
    block: str
    degraded: bool
    degraded_reason: str
    retrieval_id: int | None


def _lazy_embed(
    *,
    user_id: str,
    namespace: str,
    model: str,
    store: bool,
    other_models: bool = False,
    done: list[Memory] | None = None,
    lock=None,
) -> tuple[int, list[Memory]]:
    """Embed (a batch of) the user's live memories without a vector; with ``other_models``, also those
    embedded by another model. The first check is a partial-index lookup, so it costs nothing when all is embedded.

    Answers how many were embedded and the rows whose vectors were not stored: with ``store`` False (a caller that
    may only read) the vectors are computed, set on the rows for the search to score in memory, and never saved.
    ``done``: rows embedded so before, left out. ``lock``: called before the vectors are stored (the rows are then
    read again, under it)."""
    missing = Q(embedding__isnull=True) | ~Q(embedding_model=model) if other_models else Q(embedding__isnull=True)
    query = memories_of(user_id=user_id, namespace=namespace).filter(missing, status__in=LIVE)
    if done:
        query = query.exclude(pk__in=[m.pk for m in done])
    query = query.order_by("-updated_at")[: settings.MEMORY_LAZY_EMBED_BATCH]
    rows = list(query)
    if not rows:
        return 0, []
    if store:
        if lock is not None:
            lock()
            rows = list(query.all())
        return embeddings_refresh(rows=rows), []
    vectors, name = embeddings_compute(texts=[r.embedding_text for r in rows])
    if vectors is None:
        return 0, []
    embedding_assign(rows=rows, vectors=vectors, model=name)
    return len(rows), rows


def memory_retrieve(*, user_id: str, query: str, filters: dict | None = None, count_hits: bool = True) -> RetrieveResult:
    """The user's best memories for ``query`` and the prompt block; updates hits and streaks and logs the
    retrieval, unless ``count_hits`` is False (a caller that may only read: nothing is written, not even a missing
    vector, which is computed for the ranking only).

    Ranking: status (verified first) > semantic score > recency > hits; limits TopK, MaxItems,
    MaxChars. Deprecated memories never come back. Without a query vector (embedder down)
    or without any embedded memory, the most recent verified memories answer, flagged degraded.
    """
    filters = dict(filters or {})
    namespace = namespace_or_default(value=filters.pop("namespace", None))
    locked: set = set()

    def lock(scopes=None) -> None:
        """The user's scopes, before a write of their rows (vectors, hits), as every writer takes them first; each
        once a request (the request is one transaction: they are held to its end)."""
        wanted = set(scopes) if scopes is not None else {(namespace, private_agent_id())}
        if wanted - locked:
            user_scopes_lock(user_id=user_id, scopes=wanted - locked)
            locked.update(wanted)

    vector, model, _ = embed_query(query)  # bounded by RESOLVE_EMBED_TIMEOUT_S; None when the embedder is down
    degraded_reason = ""
    items: list[RetrievedMemory] = []
    if vector is None:
        degraded_reason = "embedder_unavailable"
    else:
        # a read-only caller stores no vector: the missing ones come back unsaved and are scored in memory
        _, pending = _lazy_embed(user_id=user_id, namespace=namespace, model=model, store=count_hits, lock=lock)
        if pending and not settings.CELERY_TASK_ALWAYS_EAGER:
            # a worker stores them (after this answer), so the next read-only retrieve need not compute them again
            embedding_schedule(ids=[m.pk for m in pending])

        def search():
            return memory_semantic_candidates(
                user_id=user_id,
                namespace=namespace,
                vector=vector,
                model=model,
                filters=filters,
                k=settings.MEMORY_RETRIEVE_TOP_K,
                min_score=settings.MEMORY_RETRIEVE_MIN_SCORE,
                pending=pending,
            )

        def embedded() -> bool:
            return memory_has_embedded(user_id=user_id, namespace=namespace, model=model, filters=filters, pending=pending)

        items = search()
        if not items and not embedded():
            # Perhaps every vector is from another model (the model changed): embed a batch now and search again.
            count, more = _lazy_embed(
                user_id=user_id,
                namespace=namespace,
                model=model,
                store=count_hits,
                other_models=True,
                done=pending,
                lock=lock,
            )
            pending += more
            if count:
                items = search()
            if not items and not embedded():
                degraded_reason = "no_embeddings"
        if (
            not degraded_reason
            and other_model_rows_left([Memory], current_model=model)  # the scope's, kept a few seconds: most often no
            and memory_of_another_model_left(user_id=user_id, namespace=namespace, model=model, filters=filters, pending=pending)
        ):
            degraded_reason = "reembedding"  # after a change of model: memories not embedded again were not compared
    fallback = bool(degraded_reason) and degraded_reason != "reembedding"
    if fallback:
        items = memory_recent_verified(
            user_id=user_id, namespace=namespace, filters=filters, limit=settings.MEMORY_RETRIEVE_MAX_ITEMS
        )
    items.sort(key=lambda i: rank_key(i, settings.MEMORY_SCORE_DECIMALS))
    kept, block = memory_block(items, max_items=settings.MEMORY_RETRIEVE_MAX_ITEMS, max_chars=settings.MEMORY_RETRIEVE_MAX_CHARS)
    ids = [i.memory.pk for i in kept]
    if not count_hits:
        return RetrieveResult(kept, block, bool(degraded_reason), degraded_reason, None)
    with transaction.atomic():
        # Hits, streaks and the log are statistics: don't make the caller wait for the WAL flush.
        # A crash may lose the last few hundred milliseconds of them, never a memory.
        with connection.cursor() as cur:
            cur.execute(*ASYNC_COMMIT)
        if ids:
            # the user's scope first, as a write of memories or an outcome takes it: their row locks never cross ours
            lock([(i.memory.namespace, i.memory.private_agent_id) for i in kept])
            memories_readable().filter(pk__in=ids).update(
                hits=F("hits") + 1, streak=F("streak") + 1, last_retrieved_at=timezone.now()
            )
            memories_auto_promote(ids=ids)
        retrieval = MemoryRetrieval.objects.create(
            namespace=namespace,
            user_id=user_id,
            query_sha256=text_hash(query),
            memory_ids=ids,
            degraded=bool(degraded_reason),
            private_agent_id=private_agent_id(),  # outcomes of other owners never land on it
        )
    if ids:
        fresh = memories_readable().defer("embedding").in_bulk(ids)
        for item in kept:
            item.memory = fresh.get(item.memory.pk, item.memory)
    return RetrieveResult(kept, block, bool(degraded_reason), degraded_reason, retrieval.pk)
