import re

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from common.api import ApplicationError
from feedback.services.retention import (
    MAX_BATCH,
    MAX_RETENTION_DAYS,
    feedback_records_archive,
    feedback_records_to_archive,
)


def _days(value: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+)\s*d?\s*", value or "")
    if not m:
        raise CommandError(f"--older-than takes days, such as 180d or 180 (got {value!r}).")
    if len(m.group(1)) > 6 or int(m.group(1)) > MAX_RETENTION_DAYS:
        raise CommandError(f"--older-than must be at most {MAX_RETENTION_DAYS} days.")
    return int(m.group(1))


class Command(BaseCommand):
    help = "Move feedback records older than the retention (FEEDBACK_RECORD_RETENTION_DAYS) to the archive table, in batches."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", help="Age in days, such as 180d (default: FEEDBACK_RECORD_RETENTION_DAYS)")
        parser.add_argument("--batch", type=int, help=f"Records per batch, at most {MAX_BATCH} (default: FEEDBACK_ARCHIVE_BATCH)")
        parser.add_argument("--dry-run", action="store_true", help="Only count the records that would move")

    def handle(self, *args, older_than, batch, dry_run, **options):
        if batch is not None and batch > MAX_BATCH:
            raise CommandError(f"--batch must be at most {MAX_BATCH}.")
        days = None if older_than is None else _days(older_than)
        try:
            cutoff, total = feedback_records_to_archive(older_than_days=days)
            if dry_run:
                self.stdout.write(f"{total} feedback record(s) created before {cutoff:%Y-%m-%d %H:%M} would be archived.")
                return
            with tqdm(total=total, desc="archiving", unit="record", disable=total == 0, file=self.stderr) as bar:
                result = feedback_records_archive(older_than_days=days, batch_size=batch, progress=bar.update)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"{result.archived} feedback record(s) created before {result.cutoff:%Y-%m-%d %H:%M} archived "
            f"in {result.batches} batch(es)."
        )
