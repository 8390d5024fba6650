import logging

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from embeddings.embedders import EmbeddingError, get_embedder
from embeddings.services import embeddings_refresh
from memories.selectors import memories_needing_embedding

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Embed every memory whose vector is missing or stale (another model, or other text), in batches; "
        "each batch commits, so an interrupted run resumes where it stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=128)
        parser.add_argument("--user", dest="user_id", help="Only this user's memories")
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar")

    def handle(self, *args, batch_size, user_id, no_progress, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            model = get_embedder().model_name
        except EmbeddingError as exc:
            raise CommandError(f"The embedder cannot load: {exc}") from exc
        pending = memories_needing_embedding(model=model, user_id=user_id)
        total = pending.count()
        done = failed = 0
        last_pk = 0
        with tqdm(total=total, desc="memories", unit="memory", disable=no_progress) as bar:
            while True:
                rows = list(pending.filter(pk__gt=last_pk)[:batch_size])
                if not rows:
                    break
                last_pk = rows[-1].pk
                try:
                    n = embeddings_refresh(rows=rows)
                except Exception:  # one bad batch must not stop the rest
                    logger.exception("memory batch after pk %s failed", last_pk)
                    n = 0
                done += n
                failed += len(rows) - n
                bar.update(len(rows))
        self.stdout.write(f"embedded: {done}, failed: {failed}, model: {model}")
        if failed:
            raise CommandError(f"{failed} memories could not be embedded; run the command again later")
