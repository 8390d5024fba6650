import logging

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from learning.embeddings import EmbeddingError, get_embedder
from learning.selectors import EMBEDDED_MODELS, embedding_rows_needing_work
from learning.services import embeddings_refresh

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Embed every row whose vector is missing or stale (another model, or other text). "
        "Works in batches and commits each, so an interrupted run resumes where it stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=128)
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar")

    def handle(self, *args, batch_size, no_progress, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            model_name = get_embedder().model_name
        except EmbeddingError as exc:
            raise CommandError(f"The embedder cannot load: {exc}") from exc
        totals = {"embedded": 0, "failed": 0}
        for model in EMBEDDED_MODELS:
            pending = embedding_rows_needing_work(model, current_model=model_name)
            total = pending.count()
            if not total:
                continue
            last_pk = 0
            with tqdm(total=total, desc=model._meta.verbose_name_plural, disable=no_progress, unit="row") as bar:
                while True:
                    rows = list(pending.filter(pk__gt=last_pk)[:batch_size])
                    if not rows:
                        break
                    last_pk = rows[-1].pk
                    try:
                        done = embeddings_refresh(rows=rows)
                    except Exception:  # count and go on: one bad batch must not stop the rest
                        logger.exception("batch after pk %s failed", last_pk)
                        done = 0
                    totals["embedded"] += done
                    totals["failed"] += len(rows) - done
                    bar.update(len(rows))
        self.stdout.write(f"embedded: {totals['embedded']}, failed: {totals['failed']}, model: {model_name}")
        if totals["failed"]:
            raise CommandError(f"{totals['failed']} row(s) could not be embedded; run the command again later")
