from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents.models import Agent
from agents.selectors import agent_get
from autonomy.services import autonomy_cycle_run
from autonomy.tasks import autonomy_cycle
from common.api import ApplicationError


class Command(BaseCommand):
    help = "Run the autonomy cycle (detect mistakes, rules, calibration, autonomy evaluation) for one or all agents."

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--agent", help="Agent id or name")
        target.add_argument("--all", action="store_true", help="Every active agent")
        parser.add_argument("--queue", action="store_true", help="Send the cycles to Celery workers instead of running them here")

    def handle(self, *args, agent, all, queue, **options):

        try:
            ids = (
                [agent_get(ref=agent).pk]
                if agent
                else list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if queue:
            for agent_id in ids:
                autonomy_cycle.delay(agent_id, "command")
            self.stdout.write(f"Queued {len(ids)} autonomy cycle(s).")
            return
        done = skipped = 0
        for agent_id in tqdm(ids, desc="autonomy cycles", unit="agent", disable=len(ids) < 2, file=self.stderr):
            episode = autonomy_cycle_run(agent_id=agent_id, trigger="command")
            if episode is None:
                skipped += 1
                continue
            done += 1
            if len(ids) == 1:
                self.stdout.write(f"Episode #{episode.pk} ({episode.status}): {episode.summary_text}")
        self.stdout.write(f"{done} cycle(s) run, {skipped} skipped (already running elsewhere).")
