"""Celery tasks of the autonomy app: learning cycles."""

import logging

from celery import shared_task
from django.conf import settings

logger = logging.getLogger(__name__)


@shared_task(name="autonomy.tasks.learning_cycle", acks_late=True)
def learning_cycle(agent_id: int, trigger: str = "celery", force_autonomy: bool = False) -> dict:
    """One agent's learning cycle; skipped (not failed) when another worker holds the agent's lock."""
    from autonomy.services import learning_cycle_run

    episode = learning_cycle_run(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy)
    if episode is None:
        return {"agent": agent_id, "episode": None, "skipped": True}
    return {"agent": agent_id, "episode": episode.pk, "status": episode.status, "summary": episode.summary, "skipped": False}


@shared_task(name="autonomy.tasks.learning_cycle_all", ignore_result=True)
def learning_cycle_all(trigger: str = "beat") -> int:
    """Queue one cycle per active agent (beat runs this every ``LEARNING_CYCLE_INTERVAL_S``)."""
    from agents.models import Agent

    ids = list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
    for agent_id in ids:
        learning_cycle.delay(agent_id, trigger)
    logger.info("queued %s learning cycle(s)%s", len(ids), " (eager)" if settings.CELERY_TASK_ALWAYS_EAGER else "")
    return len(ids)
