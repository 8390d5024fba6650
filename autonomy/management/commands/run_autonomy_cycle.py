import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents.models import Agent
from agents.selectors import agent_get
from autonomy.models import Episode, EpisodeStatus
from autonomy.services import autonomy_cycle_run, autonomy_cycles_run
from autonomy.tasks import agent_chunks, autonomy_cycle, autonomy_cycle_chunk, cycles_queue
from common.api import ApplicationError, NotFound

logger = logging.getLogger(__name__)


def agents_text(ids: list[int]) -> str:
    """``ids`` (ascending) for one line: every id when few, else the count and the first and last."""
    if len(ids) <= 10:
        return f"{len(ids)} agent(s) ({', '.join(f'#{i}' for i in ids)})"
    return f"{len(ids)} agent(s) (#{ids[0]} to #{ids[-1]})"


class Command(BaseCommand):
    help = (
        "Run the autonomy cycle (detect mistakes, rules, calibration, autonomy evaluation) for one agent, "
        "or set-based for every active agent in chunks of AUTONOMY_CYCLE_CHUNK. Every agent is run even when some "
        "fail; the command then exits non-zero naming them."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--agent", help="Agent id or name (the per-agent cycle)")
        target.add_argument("--all", action="store_true", help="Every active agent (set-based, in chunks)")
        parser.add_argument("--tenant", help="With --agent: the agent's tenant (slug); needed when several tenants use its name")
        parser.add_argument(
            "--queue",
            action="store_true",
            help="Send the cycles to Celery workers instead of running them here (with the broker down they run "
            "here, or with CELERY_FALLBACK_INLINE off are not queued)",
        )
        parser.add_argument("--chunk", type=int, help="With --all: agents per set-based cycle (default: AUTONOMY_CYCLE_CHUNK)")
        parser.add_argument("--per-agent", action="store_true", help="With --all: one per-agent cycle after another (slow)")

    def handle(self, *args, agent, all, queue, chunk, per_agent, tenant, **options):
        if tenant is not None and agent is None:
            raise CommandError("--tenant names the tenant of --agent; it does not apply to --all.")
        if chunk is not None:
            if not all or per_agent:
                raise CommandError("--chunk applies only to the set-based run of --all (not with --agent or --per-agent).")
            if chunk < 1:
                raise CommandError(f"--chunk must be at least 1 (got {chunk}).")
        try:
            ids = (
                [agent_get(ref=agent, tenant=tenant).pk]
                if agent is not None  # an empty --agent (an unset variable) names no agent: refused, not every agent
                else list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        one_by_one = agent is not None or per_agent
        batches = ids if one_by_one else agent_chunks(ids, chunk)
        if queue:
            batches = self._queue(batches, one_by_one)
            if not batches:
                return
        if one_by_one:
            self._per_agent(batches)
        else:
            self._set_based(batches)

    def _queue(self, batches: list, one_by_one: bool) -> list:
        """Queue the batches; answers those left to run here (none when all were queued)."""
        if autonomy_cycle.app.conf.task_always_eager:
            self.stdout.write("No Celery broker is configured (CELERY_BROKER_URL): running the cycles here.")
            return batches
        sent = cycles_queue(autonomy_cycle if one_by_one else autonomy_cycle_chunk, batches, "command")
        flat = lambda bs: list(bs) if one_by_one else [a for b in bs for a in b]  # noqa: E731
        queued, rest = flat(batches[:sent]), flat(batches[sent:])
        if not rest:
            how = "" if one_by_one else f" in {len(batches)} chunk(s)"
            self.stdout.write(f"Queued autonomy cycles for {len(queued)} agent(s){how}.")
            return []
        done = f"queued {agents_text(queued)}" if queued else "nothing was queued"
        if not settings.CELERY_FALLBACK_INLINE:
            raise CommandError(
                f"Broker unavailable: {done}; {agents_text(rest)} not queued "
                "(CELERY_FALLBACK_INLINE is off): start the broker or run without --queue."
            )
        self.stdout.write(f"Broker unavailable: {done}; running the cycles of {agents_text(rest)} here.")
        return batches[sent:]

    def _set_based(self, chunks: list[list[int]]):
        done = skipped = 0
        failed: list[int] = []
        total = sum(len(c) for c in chunks)
        with tqdm(total=total, desc="autonomy cycles", unit="agent", disable=total < 2, file=self.stderr) as bar:
            for c in chunks:
                try:
                    result = autonomy_cycles_run(agent_ids=c, trigger="command")
                except Exception:  # not one agent's failure (those fall back): the chunk's, the next ones still run
                    logger.exception("autonomy cycles for %s failed", agents_text(c))
                    failed.extend(c)
                else:
                    done += sum(1 for e in result.episodes if e.status == EpisodeStatus.COMPLETED)
                    skipped += len(result.skipped)
                    failed.extend(result.failed)
                bar.update(len(c))
        self.stdout.write(f"{done} cycle(s) run, {skipped} skipped (already running elsewhere).")
        self._failed_refuse(failed)

    def _per_agent(self, ids: list[int]):
        done = skipped = 0
        failed: list[int] = []
        for agent_id in tqdm(ids, desc="autonomy cycles", unit="agent", disable=len(ids) < 2, file=self.stderr):
            try:
                episode = autonomy_cycle_run(agent_id=agent_id, trigger="command")
            except NotFound:
                continue  # deleted since it was listed
            except Exception:  # logged, and recorded in the agent's failed episode, by the cycle
                failed.append(agent_id)
                if len(ids) == 1:
                    episode = Episode.objects.filter(agent_id=agent_id, status=EpisodeStatus.FAILED).order_by("-pk").first()
                    if episode is not None:
                        self.stdout.write(f"Episode #{episode.pk} ({episode.status}): {episode.summary_text}")
                continue
            if episode is None:
                skipped += 1
                continue
            done += 1
            if len(ids) == 1:
                self.stdout.write(f"Episode #{episode.pk} ({episode.status}): {episode.summary_text}")
        self.stdout.write(f"{done} cycle(s) run, {skipped} skipped (already running elsewhere).")
        self._failed_refuse(failed)

    def _failed_refuse(self, failed: list[int]) -> None:
        if failed:
            raise CommandError(
                f"The autonomy cycle failed for {agents_text(sorted(failed))}; see their failed episodes and the log."
            )
