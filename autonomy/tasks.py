"""Celery tasks of the autonomy app: autonomy cycles, one agent on demand or chunks of agents set-based."""

import logging

from celery import shared_task
from django.conf import settings

from agents.models import Agent
from autonomy.services import autonomy_cycle_run, autonomy_cycles_run, autonomy_history_purge
from common.api import NotFound
from common.tasks import task_queue, task_send_each

logger = logging.getLogger(__name__)


@shared_task(name="autonomy.cycle", acks_late=True)
def autonomy_cycle(agent_id: int, trigger: str = "celery", force_autonomy: bool = False) -> dict:
    """One agent's autonomy cycle; skipped (not failed) when another worker holds the agent's lock, reported
    missing (not failed, so never retried) when no such agent exists."""

    try:
        episode = autonomy_cycle_run(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy)
    except NotFound:
        logger.warning("autonomy cycle for agent %s: no such agent", agent_id)
        return {"agent": agent_id, "episode": None, "skipped": False, "missing": True}
    if episode is None:
        return {"agent": agent_id, "episode": None, "skipped": True, "missing": False}
    return {
        "agent": agent_id,
        "episode": episode.pk,
        "status": episode.status,
        "summary": episode.summary,
        "skipped": False,
        "missing": False,
    }


@shared_task(name="autonomy.cycle_chunk", acks_late=True)
def autonomy_cycle_chunk(agent_ids: list[int], trigger: str = "celery", force_autonomy: bool = False) -> dict:
    """The set-based cycle for a chunk of agents; agents another worker is running are skipped (advisory locks).
    When the set-based run fails, each agent's cycle runs on its own and only those that fail then count as failed
    (each with a failed episode); the task itself succeeds."""

    result = autonomy_cycles_run(agent_ids=agent_ids, trigger=trigger, force_autonomy=force_autonomy)
    return {
        "agents": len(agent_ids),
        "episodes": len(result.episodes),
        "completed": sum(1 for e in result.episodes if e.status == "completed"),
        "failed": len(result.failed),
        "skipped": result.skipped,
        "missing": result.missing,
        "transitions_proposed": sum(e.summary.get("transitions_proposed", 0) for e in result.episodes),
    }


def agent_chunks(ids: list[int], size: int | None = None) -> list[list[int]]:
    size = max(1, settings.AUTONOMY_CYCLE_CHUNK if size is None else size)
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def cycles_queue(task, batches: list, trigger: str) -> int:
    """Queue ``task(batch, trigger)`` for each batch in order; answers how many were queued. The first the broker
    (or the result store) refuses ends it: that batch and the ones after it were not sent."""
    for sent, batch in enumerate(batches):
        if not task_queue(task, batch, trigger):
            return sent
    return len(batches)


@shared_task(name="autonomy.cycle_all", ignore_result=True)
def autonomy_cycle_all(trigger: str = "beat") -> int:
    """Queue the set-based cycle for every active agent, ``AUTONOMY_CYCLE_CHUNK`` agents per task
    (beat runs this every ``AUTONOMY_CYCLE_INTERVAL_S``); with the broker down a chunk runs here or waits for
    the next beat, as ``task_send_each`` decides (the broker is not asked again once it refused a chunk). Answers
    how many agents there were."""

    ids = list(Agent.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
    chunks = agent_chunks(ids)
    sent = task_send_each(autonomy_cycle_chunk, [(chunk, trigger) for chunk in chunks])
    queued = sum(len(chunk) for chunk in chunks[:sent])
    logger.info(
        "queued autonomy cycles for %s of %s agent(s) in %s chunk(s)%s",
        queued,
        len(ids),
        len(chunks),
        " (eager)" if settings.CELERY_TASK_ALWAYS_EAGER else "",
    )
    return len(ids)


@shared_task(name="autonomy.history_purge", ignore_result=True, one_transaction=False)
def autonomy_history_purge_task() -> dict:
    """Delete episodes and superseded calibration records older than AUTONOMY_HISTORY_RETENTION_DAYS (beat: daily)."""

    return autonomy_history_purge()
