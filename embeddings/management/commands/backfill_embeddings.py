from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from embeddings.embedders import EmbeddingError, current_model_name
from embeddings.parallel import embedding_workers
from embeddings.selectors import embedded_models, embedding_rows_needing_work
from embeddings.services import embeddings_backfill

BATCH_MAX = 10_000  # rows embedded and written at once; more only holds more in memory


class Command(BaseCommand):
    help = (
        "Embed every row whose vector is missing or stale (another model, or other text). "
        "Works in batches and commits each, so an interrupted run resumes where it stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=128, help=f"Rows per batch, 1 to {BATCH_MAX}")
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar")
        parser.add_argument(
            "--status", action="store_true", help="Only count, per table, the rows waiting for a vector of the current model"
        )
        parser.add_argument(
            "--workers", type=int, default=1, help="Processes embedding at once with the local model (default 1; up to the cores)"
        )

    def handle(self, *args, batch_size, no_progress, workers, status=False, **options):
        if status:
            self._status()
            return
        if not 1 <= batch_size <= BATCH_MAX:
            raise CommandError(f"--batch-size must be from 1 to {BATCH_MAX}")
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        bars = []

        def progress(model, total):
            bar = tqdm(total=total, desc=str(model._meta.verbose_name_plural), disable=no_progress, unit="row")
            bars.append(bar)
            return bar.update

        try:
            with embedding_workers(workers) as embedder:
                totals = embeddings_backfill(batch_size=batch_size * getattr(embedder, "workers", 1), progress=progress)
        except EmbeddingError as exc:
            raise CommandError(f"The embedder cannot load: {exc}") from exc
        finally:
            for bar in bars:
                bar.close()
        if totals["busy"]:
            raise CommandError("Another backfill is running (the periodic sweep?); nothing was done.")
        self.stdout.write(f"embedded: {totals['embedded']}, failed: {totals['failed']}, model: {totals['model']}")
        if totals.get("stopped"):
            raise CommandError(
                "The embedder stopped answering (nothing embedded in two batches in a row); run the command again later"
            )
        if totals["failed"]:
            raise CommandError(f"{totals['failed']} row(s) could not be embedded; run the command again later")

    def _status(self) -> None:
        """Rows waiting for a vector of the current model (a change of model in progress: what the backfill has left)."""
        model = current_model_name()
        waiting = 0
        for table in embedded_models():
            n = embedding_rows_needing_work(table, current_model=model).count()
            waiting += n
            self.stdout.write(f"{table._meta.verbose_name_plural}: {n} waiting")
        self.stdout.write(f"total: {waiting} row(s) waiting for a vector of {model}")
