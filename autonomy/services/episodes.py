"""Cycle episodes (an ordered event log per run) and the per-agent cycle locks."""

import contextlib
import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from autonomy.models import AutonomyTransition, CalibrationRecord, Episode, EpisodeEvent, EpisodeStatus
from common.api import ApplicationError
from common.db import rows_purge
from common.validation import MAX_DAYS

logger = logging.getLogger(__name__)

LOCK_NAMESPACE_CYCLE = 61002


class EpisodeLog:
    """Collects an episode's ordered events and writes them in batches."""

    def __init__(self, episode: Episode, seq: int | None = None):
        self.episode = episode
        self.seq = episode.events.count() if seq is None else seq
        self._pending: list[EpisodeEvent] = []

    def add(self, kind: str, message: str = "", **payload) -> None:
        self.seq += 1
        self._pending.append(EpisodeEvent(episode=self.episode, seq=self.seq, kind=kind, message=message, payload=payload))

    def flush(self) -> None:
        if self._pending:
            EpisodeEvent.objects.bulk_create(self._pending)
            self._pending = []


def episode_start(*, agent_id: int | None, kind: str = "autonomy_cycle", trigger: str = "command") -> Episode:
    with transaction.atomic():
        return Episode.objects.create(agent_id=agent_id, kind=kind, trigger=trigger)


def episode_finish(*, episode: Episode, summary: dict, status: str = EpisodeStatus.COMPLETED) -> Episode:
    parts = [f"{k.replace('_', ' ')}: {v}" for k, v in summary.items() if not isinstance(v, (dict, list))]
    with transaction.atomic():
        episode.status, episode.finished_at, episode.summary = status, timezone.now(), summary
        episode.summary_text = "; ".join(parts)
        episode.save(update_fields=["status", "finished_at", "summary", "summary_text"])
    return episode


def episode_restart(*, episode: Episode, kind: str, message: str = "", **payload) -> Episode | None:
    """Begin an unfinished ``episode`` again: its events replaced by one (``kind``, ``message``, ``payload``) saying
    why, its summary emptied. None when it is finished or gone (nothing changed)."""
    with transaction.atomic():
        reset = {"status": EpisodeStatus.RUNNING, "finished_at": None, "summary": {}, "summary_text": ""}
        if not Episode.objects.filter(pk=episode.pk, status=EpisodeStatus.RUNNING).update(**reset):
            return None
        EpisodeEvent.objects.filter(episode_id=episode.pk).delete()
        for name, value in reset.items():
            setattr(episode, name, value)
        log = EpisodeLog(episode, seq=0)
        log.add(kind, message, **payload)
        log.flush()
    return episode


@contextlib.contextmanager
def agent_cycle_lock(*, agent_id: int):
    """A PostgreSQL session advisory lock per agent; yields whether it was acquired (never waits)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE_CYCLE, agent_id])
        got = cur.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE_CYCLE, agent_id])


@contextlib.contextmanager
def agents_cycle_lock(*, agent_ids: list[int]):
    """The same per-agent advisory locks for a set of agents, in one statement: yields the ids acquired (ascending);
    agents whose lock another session holds are left out (never waits). Released together at the end."""
    ids = sorted({int(a) for a in agent_ids})
    got: list[int] = []
    if ids:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT a FROM (SELECT a FROM unnest(%s::int4[]) a ORDER BY a) s WHERE pg_try_advisory_lock(%s::int4, a) ORDER BY a",
                [ids, LOCK_NAMESPACE_CYCLE],
            )
            got = [r[0] for r in cur.fetchall()]
    try:
        yield got
    finally:
        if got and connection.connection is not None:
            with connection.cursor() as cur:
                cur.execute(
                    "SELECT count(pg_advisory_unlock(%s::int4, a)) FROM unnest(%s::int4[]) a", [LOCK_NAMESPACE_CYCLE, got]
                )


@contextlib.contextmanager
def asynchronous_commit():
    """A cycle commits many small transactions; not waiting for each WAL flush makes it several times faster.
    A crash can lose only the last moments of a cycle, and the next cycle redoes them (every step is idempotent);
    nothing can be half-written."""
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit TO off")
    try:
        yield
    finally:
        if connection.connection is not None:
            with connection.cursor() as cur:
                cur.execute("RESET synchronous_commit")


def autonomy_history_purge(*, days: int | None = None, dry_run: bool = False) -> dict:
    """Delete what the cycles wrote more than AUTONOMY_HISTORY_RETENTION_DAYS ago: episodes with their events, except
    one an autonomy transition names (the run that proposed it), and calibration records superseded by a newer one of
    the same agent and scope (the latest of each is what consult answers and the next run smooths against, however
    old). Batched; answers {"episodes": n, "calibration_records": n} (``dry_run``: what it would delete, nothing
    deleted)."""
    days = settings.AUTONOMY_HISTORY_RETENTION_DAYS if days is None else days
    if not 1 <= days <= MAX_DAYS:
        raise ApplicationError(f"The retention of autonomy history must be 1 to {MAX_DAYS} days (got {days}).", field="days")
    cutoff = timezone.now() - timedelta(days=days)
    named = AutonomyTransition.objects.filter(episode_id=OuterRef("pk"))
    episodes = rows_purge(Episode.objects.filter(started_at__lt=cutoff).exclude(Exists(named)), dry_run=dry_run)
    newer = CalibrationRecord.objects.filter(agent_id=OuterRef("agent_id"), computed_at__gt=OuterRef("computed_at"))
    old = CalibrationRecord.objects.filter(computed_at__lt=cutoff)
    records = rows_purge(
        old.filter(action__isnull=False).filter(Exists(newer.filter(action_id=OuterRef("action_id")))), dry_run=dry_run
    )
    records += rows_purge(old.filter(action__isnull=True).filter(Exists(newer.filter(action__isnull=True))), dry_run=dry_run)
    if (episodes or records) and not dry_run:
        logger.info("purged %d episode(s) and %d calibration record(s) older than %d day(s)", episodes, records, days)
    return {"episodes": episodes, "calibration_records": records}
