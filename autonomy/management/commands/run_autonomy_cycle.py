from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents.models import Agent
from agents.selectors import agent_get
from autonomy.services import autonomy_cycle_run, autonomy_cycles_run
from autonomy.tasks import agent_chunks, autonomy_cycle, autonomy_cycle_chunk
from common.api import ApplicationError


class Command(BaseCommand):
    help = (
        "Run the autonomy cycle (detect mistakes, rules, calibration, autonomy evaluation) for one agent, "
        "or set-based for every active agent in chunks of AUTONOMY_CYCLE_CHUNK."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--agent", help="Agent id or name (the per-agent cycle)")
        target.add_argument("--all", action="store_true", help="Every active agent (set-based, in chunks)")
        parser.add_argument("--queue", action="store_true", help="Send the cycles to Celery workers instead of running them here")
        parser.add_argument("--chunk", type=int, help="Agents per set-based cycle (default: AUTONOMY_CYCLE_CHUNK)")
        parser.add_argument("--per-agent", action="store_true", help="With --all: one per-agent cycle after another (slow)")

    def handle(self, *args, agent, all, queue, chunk, per_agent, **options):
        try:
            ids = (
                [agent_get(ref=agent).pk]
                if agent
                else list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if agent or per_agent:
            self._per_agent(ids, queue)
            return
        chunks = agent_chunks(ids, chunk)
        if queue:
            for c in chunks:
                autonomy_cycle_chunk.delay(c, "command")
            self.stdout.write(f"Queued autonomy cycles for {len(ids)} agent(s) in {len(chunks)} chunk(s).")
            return
        done = skipped = 0
        with tqdm(total=len(ids), desc="autonomy cycles", unit="agent", disable=len(ids) < 2, file=self.stderr) as bar:
            for c in chunks:
                result = autonomy_cycles_run(agent_ids=c, trigger="command")
                done += len(result.episodes)
                skipped += len(result.skipped)
                bar.update(len(c))
        self.stdout.write(f"{done} cycle(s) run, {skipped} skipped (already running elsewhere).")

    def _per_agent(self, ids, queue):
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
