"""Delete what the autonomy cycles wrote long ago now (the daily beat task does the same), or count it first."""

from django.core.management.base import BaseCommand, CommandError

from autonomy.services.episodes import autonomy_history_purge
from common.api import ApplicationError
from common.management.options import days_argument


class Command(BaseCommand):
    help = (
        "Delete episodes (with their events) older than AUTONOMY_HISTORY_RETENTION_DAYS, except one a transition "
        "names, and calibration records a newer one of the same agent and scope superseded."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", help="Age in days, such as 90d (default: AUTONOMY_HISTORY_RETENTION_DAYS)")
        parser.add_argument("--dry-run", action="store_true", help="Only count what would be deleted")

    def handle(self, *args, older_than, dry_run, **options):
        try:
            counts = autonomy_history_purge(days=days_argument(older_than), dry_run=dry_run)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Autonomy history: {'would delete' if dry_run else 'deleted'} {counts['episodes']} episode(s) and "
            f"{counts['calibration_records']} calibration record(s)."
        )
