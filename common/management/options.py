"""Arguments and a base shared by commands of several apps: each refuses bad input with a CommandError naming the
argument."""

import re

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.validation import MAX_DAYS


def days_argument(value: str | None, *, option: str = "--older-than") -> int | None:
    """Days given as ``90`` or ``90d`` (None: the setting's default), 1 to MAX_DAYS, else CommandError."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]{1,6})\s*d?\s*", value)
    if not m or not 1 <= int(m.group(1)) <= MAX_DAYS:
        raise CommandError(f"{option} takes days from 1 to {MAX_DAYS}, such as 90d or 90 (got {value!r}).")
    return int(m.group(1))


class PurgeCommand(BaseCommand):
    """A purge a periodic task runs, run now: ``--older-than`` days (default: the retention ``setting``) and
    ``--dry-run`` (count, delete nothing). A subclass names ``setting`` and implements ``purge`` and ``report``."""

    setting = ""

    def purge(self, *, days: int | None, dry_run: bool):
        raise NotImplementedError

    def report(self, result, *, verb: str) -> str:
        raise NotImplementedError

    def add_arguments(self, parser):
        parser.add_argument("--older-than", help=f"Age in days, such as 90d (default: {self.setting})")
        parser.add_argument("--dry-run", action="store_true", help="Only count what would be deleted")

    def handle(self, *args, older_than, dry_run, **options):
        try:
            result = self.purge(days=days_argument(older_than), dry_run=dry_run)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(self.report(result, verb="would delete" if dry_run else "deleted"))
