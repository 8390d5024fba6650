from django.core.management.base import BaseCommand, CommandError

from agents.models import DEFAULT_SCOPES
from agents.services import agent_key_create
from common.api import ApplicationError


class Command(BaseCommand):
    help = "Create an API key for an agent (creating the agent if needed) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("name", help="Agent name")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_SCOPES),
            help="Comma-separated scopes: resolve, feedback, governance (default: %(default)s)",
        )
        parser.add_argument("--key-name", default="default", help="A label for this key")

    def handle(self, *args, name, scopes, key_name, **options):
        scope_list = [s.strip() for s in scopes.split(",") if s.strip()]
        try:
            key, raw = agent_key_create(agent_name=name, scopes=scope_list, key_name=key_name)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(f"Agent {key.agent.name!r}, key {key.name!r}, scopes: {', '.join(key.scopes)}")
        self.stderr.write("Store this key now; it is not shown again:")
        self.stdout.write(raw)
