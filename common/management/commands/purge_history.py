"""Delete the audit trail's old rows now (the daily beat task does the same), or count them first."""

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.management.options import days_argument
from common.retention import history_purge


class Command(BaseCommand):
    help = (
        "Delete audit-trail rows older than HISTORY_RETENTION_DAYS: every change of an object but its latest, and "
        "the whole trail of an object deleted before then; the latest row of an object that exists is kept."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", help="Age in days, such as 365d (default: HISTORY_RETENTION_DAYS)")
        parser.add_argument("--dry-run", action="store_true", help="Only count the rows that would be deleted")

    def handle(self, *args, older_than, dry_run, **options):
        try:
            counts = history_purge(days=days_argument(older_than), dry_run=dry_run)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        verb = "would delete" if dry_run else "deleted"
        for table, n in sorted(counts.items()):
            self.stdout.write(f"{table}: {n}")
        self.stdout.write(f"Audit trail: {verb} {sum(counts.values())} row(s).")
