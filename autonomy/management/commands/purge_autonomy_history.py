"""Delete what the autonomy cycles wrote long ago now (the daily beat task does the same), or count it first."""

from autonomy.services.episodes import autonomy_history_purge
from common.management.options import PurgeCommand


class Command(PurgeCommand):
    help = (
        "Delete episodes (with their events) older than AUTONOMY_HISTORY_RETENTION_DAYS, except one a transition "
        "names, and calibration records a newer one of the same agent and scope superseded."
    )
    setting = "AUTONOMY_HISTORY_RETENTION_DAYS"

    def purge(self, *, days, dry_run):
        return autonomy_history_purge(days=days, dry_run=dry_run)

    def report(self, result, *, verb):
        return (
            f"Autonomy history: {verb} {result['episodes']} episode(s) and {result['calibration_records']} calibration record(s)."
        )
