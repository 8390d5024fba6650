"""Periodic jobs of the review inbox."""

import logging

from celery import shared_task

from review.services import backlog_snapshot_take, claims_expired_purge

logger = logging.getLogger(__name__)


@shared_task(name="review.backlog_snapshot")
def backlog_snapshot_task() -> dict:
    """Record today's backlog per tenant and kind, and drop claims that ran out."""
    rows = backlog_snapshot_take()
    purged = claims_expired_purge()
    logger.info("review backlog: %d rows recorded, %d expired claims dropped", rows, purged)
    return {"rows": rows, "claims_purged": purged}
