from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from learning.catalogue import CatalogueError, parse_path
from learning.services.catalogue import verb_catalogue_load
from tenants.context import DEFAULT_SLUG, tenant_scope
from tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Load verb catalogue YAML (one file or a directory). Nothing is loaded if any entry is bad."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--tenant", default=DEFAULT_SLUG, help="Slug of the tenant whose catalogue it is (default: %(default)s)"
        )
        parser.add_argument(
            "--replace-phrases",
            action="store_true",
            help="A verb whose entry lists phrases keeps only those (phrases typed in the admin or dropped from the "
            "file are removed); without it phrases are only added",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar")

    def handle(self, *args, path, tenant, no_progress, replace_phrases, **options):
        workspace = tenant_get(slug=tenant)
        if workspace is None:
            raise CommandError(f"No tenant {tenant!r} (create_agent_key --tenant creates one).")
        try:
            entries = parse_path(path)
        except CatalogueError as exc:
            raise CommandError(f"{len(exc.errors)} error(s), nothing loaded:\n" + "\n".join(exc.errors)) from exc
        with tenant_scope([workspace.pk]):
            counts = verb_catalogue_load(entries=entries, progress=not no_progress, replace_phrases=replace_phrases)
        self.stdout.write(
            f"verbs created: {counts['verbs_created']}, updated: {counts['verbs_updated']}, "
            f"phrases added: {counts['phrases_added']}" + (f", removed: {counts['phrases_removed']}" if replace_phrases else "")
        )
        for key, what in (("reactivated", "switched back on"), ("retired", "retired")):
            if counts[key]:
                self.stdout.write(f"verbs {what} by the file: {', '.join(counts[key])}")
        if counts["shared_count"]:
            more = counts["shared_count"] - len(counts["shared"])
            self.stderr.write(
                f"warning: {counts['shared_count']} phrase(s) of the file belong to more than one active verb; resolve offers "
                f"those verbs and asks: {', '.join(counts['shared'])}" + (f" (and {more} more)" if more > 0 else "")
            )
        if counts["unembedded"]:
            self.stderr.write(
                f"warning: {counts['unembedded']} phrase(s) could not be embedded now; run backfill_embeddings later"
            )
