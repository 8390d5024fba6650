import re
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memories.services import memories_purge_deprecated

_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``90d``, ``12h``, ``2w``, ``30m`` or a bare number of days."""
    m = re.fullmatch(r"\s*(\d+)\s*([mhdw]?)\s*", text or "")
    if not m:
        raise ValueError(f"Cannot read {text!r}; use e.g. 90d, 12h, 2w or 30m.")
    return timedelta(**{_UNITS[m.group(2) or "d"]: int(m.group(1))})


class Command(BaseCommand):
    help = "Delete deprecated memories (and memory retrieval logs) older than --older-than (default 90d)."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", default=f"{settings.MEMORY_PURGE_DEFAULT_DAYS}d", help="e.g. 90d, 12h, 2w")
        parser.add_argument("--user", dest="user_id", help="Only this user's memories")
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing")

    def handle(self, *args, older_than, user_id, dry_run, **options):
        try:
            age = parse_age(older_than)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        counts = memories_purge_deprecated(older_than=age, user_id=user_id, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(
            f"{verb} {counts['memories']} deprecated memories and {counts['retrievals']} retrieval logs older than {older_than}"
        )
