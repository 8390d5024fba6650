"""Delete old resolution records now (the daily beat task does the same), or count them first."""

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.management.options import days_argument
from learning.services.decisions import resolution_records_purge


class Command(BaseCommand):
    help = (
        "Delete resolution records (every resolve's answer and explanation; labelled ones train the decision) older "
        "than RESOLUTION_RETENTION_DAYS, in batches."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", help="Age in days, such as 90d (default: RESOLUTION_RETENTION_DAYS)")
        parser.add_argument("--dry-run", action="store_true", help="Only count the records that would be deleted")

    def handle(self, *args, older_than, dry_run, **options):
        try:
            n = resolution_records_purge(days=days_argument(older_than), dry_run=dry_run)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Resolution records: {'would delete' if dry_run else 'deleted'} {n}.")
