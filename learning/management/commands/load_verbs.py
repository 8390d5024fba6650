from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from learning.catalogue import CatalogueError, parse_path
from learning.services.catalogue import verb_catalogue_load


class Command(BaseCommand):
    help = "Load verb catalogue YAML (one file or a directory). Nothing is loaded if any entry is bad."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)

    def handle(self, *args, path, **options):
        try:
            entries = parse_path(path)
        except CatalogueError as exc:
            raise CommandError(f"{len(exc.errors)} error(s), nothing loaded:\n" + "\n".join(exc.errors)) from exc
        counts = verb_catalogue_load(entries=entries)
        self.stdout.write(
            f"verbs created: {counts['verbs_created']}, updated: {counts['verbs_updated']}, "
            f"phrases added: {counts['phrases_added']}"
        )
        if counts["unembedded"]:
            self.stderr.write(
                f"warning: {counts['unembedded']} phrase(s) could not be embedded now; run backfill_embeddings later"
            )
