"""Retrieve: the user's best memories for a query, with hits, streaks, auto-promotion and the retrieval log."""

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from common.db import ASYNC_COMMIT
from common.text import text_hash
from embeddings.embedders import embed_query
from embeddings.services import embeddings_refresh
from memories.models import MemoryRetrieval
from memories.selectors import (
    LIVE,
    RetrievedMemory,
    memories_of,
    memories_readable,
    memory_block,
    memory_has_embedded,
    memory_recent_verified,
    memory_semantic_candidates,
    rank_key,
)
from memories.services.shared import memories_auto_promote, namespace_or_default


@dataclass
class RetrieveResult:
    items: list[RetrievedMemory]
    block: str
    degraded: bool
    degraded_reason: str
    retrieval_id: int | None


def _lazy_embed(*, user_id: str, namespace: str, model: str, other_models: bool = False) -> int:
    """Embed (a batch of) the user's live memories without a vector; with ``other_models``, also those
    embedded by another model. The first check is a partial-index lookup, so it costs nothing when all is embedded."""
    missing = Q(embedding__isnull=True) | ~Q(embedding_model=model) if other_models else Q(embedding__isnull=True)
    rows = list(
        memories_of(user_id=user_id, namespace=namespace)
        .filter(missing, status__in=LIVE)
        .order_by("-updated_at")[: settings.MEMORY_LAZY_EMBED_BATCH]
    )
    return embeddings_refresh(rows=rows) if rows else 0


def memory_retrieve(*, user_id: str, query: str, filters: dict | None = None, count_hits: bool = True) -> RetrieveResult:
    """The user's best memories for ``query`` and the prompt block; updates hits and streaks and logs the
    retrieval, unless ``count_hits`` is False (a caller that may only read: nothing is written).

    Ranking: status (verified first) > semantic score > recency > hits; limits TopK, MaxItems,
    MaxChars. Deprecated memories never come back. Without a query vector (embedder down)
    or without any embedded memory, the most recent verified memories answer, flagged degraded.
    """
    filters = dict(filters or {})
    namespace = namespace_or_default(value=filters.pop("namespace", None))
    vector, model, _ = embed_query(query)  # bounded by RESOLVE_EMBED_TIMEOUT_S; None when the embedder is down
    degraded_reason = ""
    items: list[RetrievedMemory] = []
    if vector is None:
        degraded_reason = "embedder_unavailable"
    else:
        _lazy_embed(user_id=user_id, namespace=namespace, model=model)

        def search():
            return memory_semantic_candidates(
                user_id=user_id,
                namespace=namespace,
                vector=vector,
                model=model,
                filters=filters,
                k=settings.MEMORY_RETRIEVE_TOP_K,
                min_score=settings.MEMORY_RETRIEVE_MIN_SCORE,
            )

        items = search()
        if not items and not memory_has_embedded(user_id=user_id, namespace=namespace, model=model, filters=filters):
            # Perhaps every vector is from another model (the model changed): embed a batch now and search again.
            if _lazy_embed(user_id=user_id, namespace=namespace, model=model, other_models=True):
                items = search()
            if not items and not memory_has_embedded(user_id=user_id, namespace=namespace, model=model, filters=filters):
                degraded_reason = "no_embeddings"
    if degraded_reason:
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
            memories_readable().filter(pk__in=ids).update(
                hits=F("hits") + 1, streak=F("streak") + 1, last_retrieved_at=timezone.now()
            )
            memories_auto_promote(ids=ids)
        retrieval = MemoryRetrieval.objects.create(
            namespace=namespace, user_id=user_id, query_sha256=text_hash(query), memory_ids=ids, degraded=bool(degraded_reason)
        )
    if ids:
        fresh = memories_readable().defer("embedding").in_bulk(ids)
        for item in kept:
            item.memory = fresh.get(item.memory.pk, item.memory)
    return RetrieveResult(kept, block, bool(degraded_reason), degraded_reason, retrieval.pk)
