from django.core.management.base import BaseCommand, CommandError

from embeddings.embedders import EmbeddingError
from memories.management.options import EMBED_MAX_BATCH, bounded, tenant_scoped, user_checked
from memories.services import memories_embed_backfill


class Command(BaseCommand):
    help = (
        "Embed every memory whose vector is missing or stale (another model, or other text), in batches; "
        "each batch commits, so an interrupted run resumes where it stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=128, help=f"Memories per batch, 1 to {EMBED_MAX_BATCH}")
        parser.add_argument("--user", dest="user_id", help="Only this user's memories")
        parser.add_argument("--tenant", help="Only this tenant's memories (slug); a user id is one tenant's user")
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar")

    def handle(self, *args, batch_size, user_id, tenant, no_progress, **options):
        batch_size = bounded(batch_size, option="--batch-size", high=EMBED_MAX_BATCH)
        user_id = user_checked(user_id)
        try:
            with tenant_scoped(tenant):
                result = memories_embed_backfill(batch_size=batch_size, user_id=user_id, progress=not no_progress)
        except EmbeddingError as exc:
            raise CommandError(f"The embedder cannot load: {exc}") from exc
        self.stdout.write(f"embedded: {result['embedded']}, failed: {result['failed']}, model: {result['model']}")
        if result["failed"]:
            raise CommandError(f"{result['failed']} memories could not be embedded; run the command again later")
