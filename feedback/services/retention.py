"""Retention: feedback records older than ``FEEDBACK_RECORD_RETENTION_DAYS`` move to FeedbackRecordArchive.

Each batch is one statement (DELETE … RETURNING in a CTE feeding INSERT … SELECT),
so a record is either live or archived, never both or neither, and each batch
commits on its own: no lock is held longer than one batch. Rows another
transaction holds are skipped (``FOR UPDATE SKIP LOCKED``) and moved by a later run.

Mistake patterns keep their counts (``occurrence_count`` is stored, and detection
only counts records inside ``MISTAKE_WINDOW_DAYS``, so the retention period must be
longer than that window); calibration reads proposals and executions, not records.
"""

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from common.api import ApplicationError
from common.validation import MAX_DAYS
from feedback.models import FeedbackRecord, FeedbackRecordArchive

logger = logging.getLogger(__name__)

_COLUMNS = [f.column for f in FeedbackRecord._meta.concrete_fields]

MAX_RETENTION_DAYS = MAX_DAYS
MAX_BATCH = 1_000_000  # records per statement: one statement's transaction stays short

# The batch is chosen once, in a MATERIALIZED CTE: written as ``WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP
# LOCKED)`` the planner may rescan the sub-select and move more than n rows in one statement (seen under load).
_ARCHIVE_BATCH_SQL = """
WITH batch AS MATERIALIZED (
    SELECT id AS batch_id FROM {live}
     WHERE created_at < %(cutoff)s AND id > %(after)s
     ORDER BY id LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {live} fr USING batch WHERE fr.id = batch.batch_id
    RETURNING {columns}
), archived AS (
    INSERT INTO {archive} ({columns}, archived_at)
    SELECT {columns}, now() FROM moved
    RETURNING id
)
SELECT count(*), max(id) FROM archived
"""


@dataclass
class ArchiveResult:
    cutoff: datetime
    archived: int = 0
    batches: int = 0
    dry_run: bool = False


def _sql() -> str:
    return _ARCHIVE_BATCH_SQL.format(
        live=FeedbackRecord._meta.db_table,
        archive=FeedbackRecordArchive._meta.db_table,
        columns=", ".join(f'"{c}"' for c in _COLUMNS),
    )


def _days(older_than_days) -> int:
    days = settings.FEEDBACK_RECORD_RETENTION_DAYS if older_than_days is None else older_than_days
    if isinstance(days, bool) or not isinstance(days, int) or days <= 0:
        raise ApplicationError("The retention must be a positive number of days.", field="older_than")
    if days > MAX_RETENTION_DAYS:
        raise ApplicationError(f"The retention must be at most {MAX_RETENTION_DAYS} days.", field="older_than")
    if days <= settings.MISTAKE_WINDOW_DAYS:
        raise ApplicationError(
            f"The retention ({days} days) must be longer than MISTAKE_WINDOW_DAYS ({settings.MISTAKE_WINDOW_DAYS}); "
            "archiving records inside the window would lower the counts of mistake patterns.",
            field="older_than",
        )
    return days


def feedback_records_to_archive(*, older_than_days: int | None = None) -> tuple[datetime, int]:
    """(cutoff, how many live records are older than it)."""
    cutoff = timezone.now() - timedelta(days=_days(older_than_days))
    return cutoff, FeedbackRecord.objects.filter(created_at__lt=cutoff).count()


def feedback_records_archive_batches(
    *, older_than_days: int | None = None, batch_size: int | None = None, max_batches: int | None = None
) -> Iterator[int]:
    """Move old records batch by batch (each its own transaction), yielding each batch's count."""
    days = _days(older_than_days)
    batch = settings.FEEDBACK_ARCHIVE_BATCH if batch_size is None else batch_size
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise ApplicationError("The batch size must be a positive number.", field="batch")
    if batch > MAX_BATCH:
        raise ApplicationError(f"The batch size must be at most {MAX_BATCH}.", field="batch")
    cutoff = timezone.now() - timedelta(days=days)
    sql, after, done = _sql(), 0, 0
    while max_batches is None or done < max_batches:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql, {"cutoff": cutoff, "after": after, "batch": batch})
            n, last = cur.fetchone()
        if not n:
            return
        done += 1
        after = last  # keyset: the next batch starts past this one (skipped, locked rows wait for the next run)
        yield n


def feedback_records_archive(
    *,
    older_than_days: int | None = None,
    batch_size: int | None = None,
    dry_run: bool = False,
    max_batches: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> ArchiveResult:
    """Archive every live record older than the retention; answers how many moved (or would move, ``dry_run``)."""
    if dry_run:
        cutoff, n = feedback_records_to_archive(older_than_days=older_than_days)
        return ArchiveResult(cutoff=cutoff, dry_run=True, archived=n)
    # no count of the backlog first (the periodic run would read every old record's key on each tick for nothing)
    result = ArchiveResult(cutoff=timezone.now() - timedelta(days=_days(older_than_days)), dry_run=False)
    for moved in feedback_records_archive_batches(
        older_than_days=older_than_days, batch_size=batch_size, max_batches=max_batches
    ):
        result.archived += moved
        result.batches += 1
        if progress is not None:
            progress(moved)
    logger.info("archived %s feedback record(s) older than %s in %s batch(es)", result.archived, result.cutoff, result.batches)
    return result
