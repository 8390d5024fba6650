"""Celery tasks of the feedback app: retention."""

import logging

from celery import shared_task

from feedback.services.retention import feedback_records_archive

logger = logging.getLogger(__name__)


@shared_task(name="feedback.archive_records", ignore_result=True)
def feedback_archive_records(max_batches: int | None = None) -> int:
    """Move feedback records past the retention to the archive (beat, every ``FEEDBACK_ARCHIVE_INTERVAL_S``).

    Batches commit one by one, so a run stopped half-way loses nothing and the next run goes on."""

    return feedback_records_archive(max_batches=max_batches).archived
