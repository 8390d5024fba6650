import re
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.validation import MAX_DAYS
from memories.management.options import tenant_scoped, user_checked
from memories.services import memories_purge_deprecated

_MINUTES = {"m": 1, "h": 60, "d": 24 * 60, "w": 7 * 24 * 60}
_MIN_DAYS, _MAX_DAYS = 1, MAX_DAYS


def parse_age(text: str) -> timedelta:
    """``90d``, ``12h``, ``2w``, ``30m`` or a bare number of days; 1 day to 36,500 days (100 years)."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([mhdw]?)\s*", text or "")
    if not m:
        raise ValueError(f"--older-than: cannot read {text!r}; use e.g. 90d, 12h, 2w or 30m.")
    digits = m.group(1).lstrip("0") or "0"
    minutes = int(digits) * _MINUTES[m.group(2) or "d"] if len(digits) <= 15 else None
    if minutes is not None and minutes < _MIN_DAYS * _MINUTES["d"]:
        raise ValueError(f"--older-than must be at least 1 day (1d, 24h or 1440m), not {text.strip()!r}.")
    if minutes is None or minutes > _MAX_DAYS * _MINUTES["d"]:
        raise ValueError(f"--older-than must be at most {_MAX_DAYS} days (100 years), not {text.strip()[:40]!r}.")
    return timedelta(minutes=minutes)


class Command(BaseCommand):
    help = (
        "Delete deprecated memories (and memory retrieval logs) older than --older-than (default "
        f"{settings.MEMORY_PURGE_DEFAULT_DAYS}d; 1 day to {_MAX_DAYS} days). Retrieval logs younger than "
        "MEMORY_OUTCOME_WINDOW_S are always kept: outcome feedback reads them."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than", default=f"{settings.MEMORY_PURGE_DEFAULT_DAYS}d", help="e.g. 90d, 12h, 2w; at least 1d"
        )
        parser.add_argument("--user", dest="user_id", help="Only this user's memories")
        parser.add_argument(
            "--tenant", help="Only this tenant's memories (slug); needed with --user when several tenants have that user id"
        )
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing")

    def handle(self, *args, older_than, user_id, tenant, dry_run, **options):
        try:
            age = parse_age(older_than)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        user_id = user_checked(user_id)
        try:
            with tenant_scoped(tenant, user_id=user_id, must_choose=True):
                counts = memories_purge_deprecated(older_than=age, user_id=user_id, dry_run=dry_run)
        except ApplicationError as exc:
            raise CommandError(f"--older-than: {exc.message}") from exc
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(
            f"{verb} {counts['memories']} deprecated memories and {counts['retrievals']} retrieval logs older than {older_than}"
        )
