"""Delete the audit trail's old rows now (the daily beat task does the same), or count them first."""

from common.management.options import PurgeCommand
from common.retention import history_purge


class Command(PurgeCommand):
    help = (
        "Delete audit-trail rows older than HISTORY_RETENTION_DAYS: every change of an object but its latest, and "
        "the whole trail of an object deleted before then; the latest row of an object that exists is kept."
    )
    setting = "HISTORY_RETENTION_DAYS"

    def purge(self, *, days, dry_run):
        return history_purge(days=days, dry_run=dry_run)

    def report(self, result, *, verb):
        tables = "".join(f"{table}: {n}\n" for table, n in sorted(result.items()))
        return f"{tables}Audit trail: {verb} {sum(result.values())} row(s)."
