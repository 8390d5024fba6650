"""Bulk-import learned phrases from a YAML, JSON or CSV file: every row valid, or nothing is written."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.text import terminal_safe
from common.validators import USER_ID_RE
from embeddings.parallel import embedding_workers
from learning.importing import FORMATS, ImportFormatError, parse
from learning.services.imports import ImportRejected, phrases_import
from tenants.context import DEFAULT_SLUG, tenant_scope
from tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Import learned phrases (phrase → verb) from FILE. Rows are all validated first; with any error nothing is imported."

    def add_arguments(self, parser):
        parser.add_argument("file", help="Path of the file to import")
        parser.add_argument("--format", choices=FORMATS, help="File format (default: from the file extension)")
        parser.add_argument("--scope", choices=["global", "user"], default="global")
        parser.add_argument("--user-id", help="The user, for --scope user")
        parser.add_argument("--dry-run", action="store_true", help="Report what would change; write nothing")
        parser.add_argument(
            "--override",
            action="store_true",
            help="Replace phrases a reviewer switched off or the user's correction or confirmation taught another verb (kept otherwise)",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar")
        parser.add_argument("--tenant", default=DEFAULT_SLUG, help="Slug of the tenant to import into (default: %(default)s)")
        parser.add_argument(
            "--workers", type=int, default=1, help="Processes embedding at once with the local model (default 1; up to the cores)"
        )

    def handle(self, *args, file, format, scope, user_id, dry_run, override, no_progress, tenant, workers, **options):
        import re

        path = Path(file)
        fmt = format or {".yml": "yaml", ".yaml": "yaml", ".json": "json", ".csv": "csv"}.get(path.suffix.lower())
        if fmt is None:
            raise CommandError(f"Cannot tell the format of {path.name}; pass --format {'|'.join(FORMATS)}.")
        if scope == "user" and not user_id:
            raise CommandError("--scope user needs --user-id.")
        if scope == "global" and user_id:
            raise CommandError("--user-id needs --scope user.")
        if user_id and not re.fullmatch(USER_ID_RE, user_id):  # not re.match: "$" also matches before a final newline
            raise CommandError(f"Malformed user id {user_id!r}.")
        if workers < 1:
            raise CommandError("--workers must be at least 1.")
        limit = settings.LEARNING_IMPORT_MAX_BYTES
        try:
            if not path.is_file():
                raise CommandError(f"No such file: {path}")
            size = path.stat().st_size
            if size > limit:
                raise CommandError(f"{path.name} is {size} bytes; the limit is {limit} bytes.")
            with path.open("rb") as f:
                content = f.read(limit + 1)  # a file whose size the system does not report is bounded too
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror or exc}.") from None
        try:
            rows = parse(content, fmt)
        except ImportFormatError as exc:
            raise CommandError(f"{path.name}: {exc}") from None
        workspace = tenant_get(slug=tenant)
        if workspace is None:
            raise CommandError(f"No tenant {tenant!r}.")
        try:
            with embedding_workers(workers), tenant_scope([workspace.pk]):
                result = phrases_import(
                    rows=rows,
                    user_id=user_id if scope == "user" else None,
                    dry_run=dry_run,
                    override=override,
                    progress=not no_progress,
                    source="import",
                )
        except ImportRejected as exc:
            for error in exc.extra["errors"]:
                self.stderr.write(terminal_safe(f"row {error['row']}: {error['field']}: {error['reason']}"))
            raise CommandError(f"{exc.extra['rejected']} invalid row(s); nothing was imported.") from None
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        prefix = "dry run: would import" if dry_run else "imported"
        self.stdout.write(
            f"{prefix} {result['imported']}, updated {result['updated']}, unchanged {result['unchanged']}, "
            f"kept {result['kept']}, rejected {result['rejected']} ({result['rows']} rows, scope {result['scope']})"
        )
        if result["kept"]:
            self.stdout.write(
                f"{result['kept']} stored phrase(s) kept as a reviewer switched them off or a correction or confirmation "
                "taught them another verb (--override replaces them)."
            )
        if dry_run:
            for phrase in result.get("would_add", [])[:20]:
                self.stdout.write(terminal_safe(f"  + {phrase}"))
            for phrase in result.get("would_update", [])[:20]:
                self.stdout.write(terminal_safe(f"  ~ {phrase}"))
            for phrase in result.get("would_keep", [])[:20]:
                self.stdout.write(terminal_safe(f"  = {phrase}"))
        if result["unembedded"]:
            self.stderr.write(
                f"{result['unembedded']} phrase(s) stored without a vector (embedder unavailable); run backfill_embeddings."
            )
