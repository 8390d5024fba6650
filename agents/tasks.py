"""Periodic work for agents' requests."""

import logging

from celery import shared_task

from agents.services import idempotent_requests_purge

logger = logging.getLogger(__name__)


@shared_task(name="agents.idempotent_requests_purge", ignore_result=True, one_transaction=False)
def idempotent_requests_purge_task() -> int:
    """Delete the stored answers of idempotent requests older than API_IDEMPOTENCY_TTL_S (beat: hourly)."""

    count = idempotent_requests_purge()
    logger.info("purged %d stored idempotent answers", count)
    return count
