"""Celery tasks of the learning app."""

import logging

from celery import shared_task

from learning.services.blocks import phrase_blocks_purge_expired
from learning.services.disambiguations import disambiguation_signals_process, disambiguations_expire

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def purge_expired_blocks_task() -> int:
    """Periodic: delete expired blocklist entries (they stopped applying at expiry already)."""

    count = phrase_blocks_purge_expired()
    logger.info("purged %d expired blocklist entries", count)
    return count


# Disambiguation requests: learning from answers, expiring stale ones.


# --- Disambiguation feedback loop ---


@shared_task(
    name="learning.disambiguation_signals_process",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(ConnectionError,),
    max_retries=3,
)
def disambiguation_signals_process_task(request_pk: int) -> dict:
    """Learn from one disambiguation's signals (idempotent: a second run does nothing)."""

    return disambiguation_signals_process(request_pk=request_pk)


@shared_task(name="learning.disambiguations_expire", ignore_result=True)
def disambiguations_expire_task() -> int:
    """Mark stale open disambiguation requests ``expired`` (beat: every minute)."""

    return disambiguations_expire()
