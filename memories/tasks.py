"""Celery tasks of the memories app."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from memories.models import Memory
from memories.services import memories_embed, memories_purge_deprecated

logger = logging.getLogger(__name__)


@shared_task(bind=True, max_retries=3, default_retry_delay=30, ignore_result=True)
def memory_embed(self, memory_ids: list[int]) -> int:
    """Embed new or changed memories. On a worker, retried when the embedder is down;
    eager (the embedded default) it gives up quietly and the next retrieval embeds them lazily."""

    wanted = len(memory_ids)
    done = memories_embed(memory_ids=memory_ids)
    if done < wanted and not self.request.is_eager:
        if Memory.objects.filter(pk__in=memory_ids, embedding__isnull=True).exists():
            raise self.retry()
    return done


# --- Memories: periodic purge ---


@shared_task(ignore_result=True, one_transaction=False)
def memory_purge_deprecated_task(days: int | None = None) -> dict:
    """Delete deprecated memories and retrieval logs older than ``days`` (periodic: MEMORY_PURGE_DEFAULT_DAYS; the
    admin's action sends its own), in batches that each commit on their own."""
    days = settings.MEMORY_PURGE_DEFAULT_DAYS if days is None else days
    counts = memories_purge_deprecated(older_than=timedelta(days=days))
    logger.info("purged %(memories)d deprecated memories and %(retrievals)d retrieval logs", counts)
    return counts
