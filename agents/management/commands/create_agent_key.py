from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agents.models import DEFAULT_SCOPES
from agents.services import agent_key_create
from common.api import ApplicationError
from tenants.models import DEFAULT_SLUG
from tenants.services import SLUG_RE, tenant_create

_ARGUMENTS = {"name": "name", "scopes": "--scopes", "key_name": "--key-name"}


class Command(BaseCommand):
    help = (
        "Create an API key for an agent (creating the agent if needed) and print it once. A key name the agent "
        "already has on an active key is refused: give another --key-name, or revoke the old key first (admin)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="Agent name")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_SCOPES),
            help="Comma-separated scopes: resolve, feedback, governance (default: %(default)s)",
        )
        parser.add_argument("--key-name", default="default", help="A label for this key, unique among the agent's active keys")
        parser.add_argument(
            "--tenant", default=DEFAULT_SLUG, help="Slug of the agent's tenant, created if new (default: %(default)s)"
        )

    def handle(self, *args, name, scopes, key_name, tenant, **options):
        scope_list = [s.strip() for s in scopes.split(",") if s.strip()]
        if not SLUG_RE.fullmatch(tenant):
            raise CommandError(f"--tenant must be a slug (letters, digits, - and _), not {tenant!r}.")
        try:
            with transaction.atomic():  # a new tenant is kept only with its key
                workspace = tenant_create(slug=tenant)
                key, raw = agent_key_create(
                    agent_name=name, scopes=scope_list, key_name=key_name, tenant=workspace, unique_name=True
                )
        except ApplicationError as exc:
            argument = _ARGUMENTS.get(exc.field)
            raise CommandError(f"{argument}: {exc.message}" if argument else exc.message) from exc
        self.stderr.write(f"Agent {key.agent.name!r} of tenant {tenant!r}, key {key.name!r}, scopes: {', '.join(key.scopes)}")
        self.stderr.write("Store this key now; it is not shown again:")
        self.stdout.write(raw)
