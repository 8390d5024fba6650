"""The base of a command about one agent's data: ``--agent`` (id or name) and ``--dry-run``, run inside the agent's
tenant; a refusal is the command's error message. Work refused because the agent's switch to shared user data is
still reaching its processes (a few seconds) waits for it and runs once more."""

import logging
import time

from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_get
from common.api import ApplicationError
from tenants.context import tenant_scope

logger = logging.getLogger(__name__)


class AgentCommand(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="The agent's id or name")
        parser.add_argument("--tenant", help="The agent's tenant (slug); needed when several tenants use its name")
        parser.add_argument("--dry-run", action="store_true", help="Say what would change; change nothing")

    def handle(self, *args, **options):
        try:
            agent = agent_get(ref=options["agent"], tenant=options["tenant"])
            with tenant_scope([agent.tenant_id]):
                try:
                    self.run(agent=agent, dry_run=options["dry_run"])
                except ApplicationError as exc:
                    if exc.code != "switch_settling":
                        raise
                    wait = float(exc.extra["retry_after_s"])
                    logger.info("agent %s: waiting %.1f s for its switch to shared data to reach every process", agent, wait)
                    time.sleep(wait)
                    self.run(agent=agent, dry_run=options["dry_run"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None

    def run(self, *, agent, dry_run: bool) -> None:
        raise NotImplementedError
