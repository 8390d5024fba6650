from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_get
from common.api import ApplicationError
from feedback.services.mistakes import MAX_WINDOW_DAYS, mistake_patterns_detect


class Command(BaseCommand):
    help = "Group negative feedback into repeated-mistake patterns (database-side; safe to run concurrently)."

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="Agent id or name (default: all agents)")
        parser.add_argument("--tenant", help="With --agent: the agent's tenant (slug); needed when several tenants use its name")
        parser.add_argument(
            "--window-days", type=int, default=None, help="Look back this many days (default: MISTAKE_WINDOW_DAYS, 30)"
        )
        parser.add_argument("--min", type=int, default=None, dest="min_count", help="Records needed for a pattern (default 3)")

    def handle(self, *args, agent, tenant, window_days, min_count, **options):
        if tenant is not None and agent is None:
            raise CommandError("--tenant names the tenant of --agent; without --agent every agent's feedback is read.")
        if window_days is not None and window_days > MAX_WINDOW_DAYS:
            raise CommandError(f"--window-days must be at most {MAX_WINDOW_DAYS}.")
        try:
            agent_id = agent_get(ref=agent, tenant=tenant).pk if agent is not None else None  # "" names no agent
            result = mistake_patterns_detect(agent_id=agent_id, window_days=window_days, min_count=min_count)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"{len(result.created)} new pattern(s), {len(result.updated)} updated, {result.linked_records} record(s) linked."
        )
