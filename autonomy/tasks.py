"""Celery tasks of the autonomy app: autonomy cycles."""

import logging

from celery import shared_task
from django.conf import settings

from agents.models import Agent
from autonomy.services import autonomy_cycle_run

logger = logging.getLogger(__name__)


@shared_task(name="autonomy.cycle", acks_late=True)
def autonomy_cycle(agent_id: int, trigger: str = "celery", force_autonomy: bool = False) -> dict:
    """One agent's autonomy cycle; skipped (not failed) when another worker holds the agent's lock."""

    episode = autonomy_cycle_run(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy)
    if episode is None:
        return {"agent": agent_id, "episode": None, "skipped": True}
    return {"agent": agent_id, "episode": episode.pk, "status": episode.status, "summary": episode.summary, "skipped": False}


@shared_task(name="autonomy.cycle_all", ignore_result=True)
def autonomy_cycle_all(trigger: str = "beat") -> int:
    """Queue one cycle per active agent (beat runs this every ``AUTONOMY_CYCLE_INTERVAL_S``)."""

    ids = list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
    for agent_id in ids:
        autonomy_cycle.delay(agent_id, trigger)
    logger.info("queued %s autonomy cycle(s)%s", len(ids), " (eager)" if settings.CELERY_TASK_ALWAYS_EAGER else "")
    return len(ids)
