"""Delete old resolution records now (the daily beat task does the same), or count them first."""

from common.management.options import PurgeCommand
from learning.services.decisions import resolution_records_purge


class Command(PurgeCommand):
    help = (
        "Delete resolution records (every resolve's answer and explanation; labelled ones train the decision) older "
        "than RESOLUTION_RETENTION_DAYS, in batches."
    )
    setting = "RESOLUTION_RETENTION_DAYS"

    def purge(self, *, days, dry_run):
        return resolution_records_purge(days=days, dry_run=dry_run)

    def report(self, result, *, verb):
        return f"Resolution records: {verb} {result}."
