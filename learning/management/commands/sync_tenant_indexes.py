"""Create, rebuild and drop the per-tenant partial HNSW indexes on learned phrases (learning.services.indexes)."""

from django.core.management.base import BaseCommand, CommandError

from learning.services.indexes import learned_phrase_tenant_indexes_sync


class Command(BaseCommand):
    help = (
        "Give every tenant with at least LEARNED_TENANT_INDEX_MIN_PHRASES learned phrases (and under half of all) its "
        "own partial HNSW index, built concurrently; drop those no longer needed. The hourly beat task does the same."
    )

    def add_arguments(self, parser):
        parser.add_argument("--min-phrases", type=int, default=None, help="override LEARNED_TENANT_INDEX_MIN_PHRASES")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar")

    def handle(self, *args, min_phrases=None, no_progress=False, **options):
        if min_phrases is not None and min_phrases < 1:
            raise CommandError("--min-phrases must be a positive number")
        result = learned_phrase_tenant_indexes_sync(min_phrases=min_phrases, progress=not no_progress)
        if result.busy:
            raise CommandError("Another sync of the tenant indexes is running (the hourly task?); nothing was done.")
        self.stdout.write(
            f"Tenant indexes: created {result.created or 'none'}, rebuilt {result.rebuilt or 'none'}, "
            f"dropped {result.dropped or 'none'}, kept {result.kept or 'none'}."
        )
        if result.failed:
            raise CommandError(f"The indexes of tenant(s) {result.failed} failed (the log says why); run it again.")
