"""Give an agent's private memories to the tenant's shared agents."""

from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_get
from common.api import ApplicationError
from memories.services.owners import private_memories_share
from tenants.context import tenant_scope


class Command(BaseCommand):
    help = (
        "After an agent's private_user_data was switched off: its users' memories, quarantined lessons and retrieval "
        "log become shared. A memory its user already has a live shared copy of stays the agent's and is listed. "
        "Learned phrases: share_private_phrases."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="The agent's id or name")
        parser.add_argument("--dry-run", action="store_true", help="Say what would move; change nothing")

    def handle(self, *args, **options):
        try:
            agent = agent_get(ref=options["agent"])
            with tenant_scope([agent.tenant_id]):
                result = private_memories_share(agent=agent, dry_run=options["dry_run"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        verb = "would be" if result["dry_run"] else "are"
        self.stdout.write(
            f"Agent {result['agent']}: {result['memories_shared']} of its memories {verb} shared, {result['memories_kept']} kept (a live shared copy holds the text); "
            f"{result['quarantined_shared']} quarantined lesson(s) and {result['retrievals_shared']} retrieval(s) {verb} shared."
        )
        for c in result["conflicts"]:
            self.stdout.write(f"  kept: #{c['id']} of user {c['user_id']}: {c['content']!r}")
