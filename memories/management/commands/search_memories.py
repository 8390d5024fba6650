from django.core.management.base import BaseCommand, CommandError

from common.parsers import text_problem
from common.text import terminal_safe
from embeddings.embedders import EmbeddingError, get_embedder
from memories.management.options import SEARCH_MAX_LIMIT, bounded, tenant_scoped, user_checked
from memories.selectors import memory_search_text


class Command(BaseCommand):
    help = (
        "Search memories semantically and by substring (default: both, deduplicated, ranked by score = cosine "
        "similarity + 0.25 for a literal match). With --user only that user's memories; without, every user's; with "
        "--tenant only that tenant's, without every tenant's. "
        "Without a model, only the substring search runs (with a warning)."
    )

    def add_arguments(self, parser):
        parser.add_argument("query")
        parser.add_argument("--user", dest="user_id", help="Only this user's memories")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--semantic", action="store_true", help="Only the vector search")
        mode.add_argument("--substring", action="store_true", help="Only the substring search")
        parser.add_argument("--limit", type=int, default=20, help=f"At most this many hits, 1 to {SEARCH_MAX_LIMIT}")
        parser.add_argument("--include-deprecated", action="store_true")
        parser.add_argument("--tenant", help="Only this tenant's memories (slug); a user id is one tenant's user")

    def handle(self, *args, query, user_id, semantic, substring, limit, include_deprecated, tenant, **options):
        scope = tenant_scoped(tenant)
        query = query.strip()
        if not query:
            raise CommandError("Give a non-empty query.")
        problem = text_problem(query)
        if problem:
            raise CommandError(f"The query {problem} (text the database cannot store or search); give plain text.")
        user_id = user_checked(user_id)
        limit = bounded(limit, option="--limit", high=SEARCH_MAX_LIMIT)
        mode = "semantic" if semantic else "substring" if substring else "both"
        if mode != "substring":
            try:
                get_embedder()
            except EmbeddingError as exc:
                if mode == "semantic":
                    raise CommandError(f"No embedding model available: {exc}") from exc
                self.stderr.write(self.style.WARNING(f"No embedding model available ({exc}); substring search only."))
                mode = "substring"
        with scope:
            hits, reason = memory_search_text(
                query=query, user_id=user_id, mode=mode, limit=limit, include_deprecated=include_deprecated
            )
        if reason and mode == "semantic":
            raise CommandError("No embedding model available: the embedder failed on the query.")
        if reason:
            self.stderr.write(self.style.WARNING("The embedder failed; substring search only."))
        if not hits:
            self.stdout.write("No memories found.")
            return
        self.stdout.write(f"{'score':>6}  {'semantic':>8}  {'match':<9}  {'id':>7}  {'user':<20}  {'status/type':<20}  content")
        for h in hits:
            m = h.memory
            semantic_score = f"{h.semantic:.3f}" if h.semantic is not None else "-"
            content = terminal_safe(" ".join(m.content.split()))
            content = content if len(content) <= 100 else content[:99] + "…"
            self.stdout.write(
                f"{h.score:6.3f}  {semantic_score:>8}  {h.matched_by:<9}  {m.pk:>7}  {m.user_id[:20]:<20}  "
                f"{m.status + '/' + m.memory_type:<20}  {content}"
            )
