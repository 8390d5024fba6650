"""Celery tasks of the embeddings app."""

import logging

from celery import shared_task

from embeddings.embedders import EmbeddingError
from embeddings.services import embeddings_backfill

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def embeddings_backfill_task() -> dict:
    """Periodic sweep: embed rows written while the embedder was down, or made by another model."""

    try:
        return embeddings_backfill()
    except EmbeddingError as exc:
        logger.warning("embedding sweep skipped: %s", exc)
        return {"embedded": 0, "failed": 0, "model": ""}
