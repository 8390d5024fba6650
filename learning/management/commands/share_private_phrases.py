"""Give an agent's private learned phrases and phrase evidence to the tenant's shared agents."""

from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_get
from common.api import ApplicationError
from learning.services.owners import private_phrases_share
from tenants.context import tenant_scope


class Command(BaseCommand):
    help = (
        "After an agent's private_user_data was switched off: its users' learned phrases and phrase evidence become "
        "shared. A text its user already has a shared phrase for stays the agent's and is listed. "
        "memories: share_private_memories."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="The agent's id or name")
        parser.add_argument("--dry-run", action="store_true", help="Say what would move; change nothing")

    def handle(self, *args, **options):
        try:
            agent = agent_get(ref=options["agent"])
            with tenant_scope([agent.tenant_id]):
                result = private_phrases_share(agent=agent, dry_run=options["dry_run"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        verb = "would be" if result["dry_run"] else "are"
        self.stdout.write(
            f"Agent {result['agent']}: {result['phrases_shared']} learned phrase(s) {verb} shared, "
            f"{result['phrases_kept']} kept (a shared phrase holds the text); "
            f"{result['evidence_shared']} evidence row(s) {verb} shared, {result['evidence_merged']} added into shared rows."
        )
        for c in result["conflicts"]:
            self.stdout.write(f"  kept: user {c['user_id']}: {c['phrase']!r} → {c['verb']} (shared: {c['shared_verb']})")
