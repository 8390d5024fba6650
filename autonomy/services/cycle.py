"""The autonomy cycle of one agent: detect mistakes, create rules, calibrate, evaluate autonomy; one episode."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.models import Episode, EpisodeStatus
from autonomy.services.calibration import calibration_compute
from autonomy.services.episodes import EpisodeLog, agent_cycle_lock, episode_finish, episode_start
from autonomy.services.evaluation import _evaluation_due_q, autonomy_evaluate
from common.api import NotFound
from feedback.selectors import agent_action_ids, patterns_by_ids
from feedback.services.mistakes import DetectionResult, mistake_patterns_detect
from feedback.services.rules import correction_rules_create, correction_rules_expire

logger = logging.getLogger(__name__)


def autonomy_cycle_run(
    *, agent_id: int, trigger: str = "command", force_autonomy: bool = False, episode: Episode | None = None
) -> Episode | None:
    """Detect mistakes, create rules for new or reopened patterns, calibrate, evaluate autonomy: one episode.

    Returns None when another worker is running this agent's cycle (advisory lock). ``episode``: an unfinished
    episode of this agent to record the run in, after its events so far (a failed set-based run's, begun again),
    instead of a new one. A failure is logged, recorded in the episode (failed), and raised.
    """

    if episode is not None and episode.agent_id != agent_id:
        raise ValueError(f"episode #{episode.pk} is not agent {agent_id}'s")
    if not Agent.objects.filter(pk=agent_id).exists():
        raise NotFound(f"Agent {agent_id} not found.", field="agent")
    with agent_cycle_lock(agent_id=agent_id) as acquired:
        if not acquired:
            logger.info("autonomy cycle for agent %s already running elsewhere; skipped", agent_id)
            return None
        with connection.cursor() as cur:
            # A cycle commits a dozen small transactions; not waiting for each WAL flush makes it
            # several times faster. A crash can lose only the last moments of a cycle, and the
            # next cycle redoes them (every step is idempotent); nothing can be half-written.
            cur.execute("SET synchronous_commit TO off")
        try:
            return _autonomy_cycle_steps(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy, episode=episode)
        finally:
            if connection.connection is not None:
                with connection.cursor() as cur:
                    cur.execute("RESET synchronous_commit")


# The events of each step, shared by the per-agent and the set-based cycle so both record the same episode.


def detection_log(*, log: EpisodeLog, summary: dict, detection: DetectionResult, changed) -> None:
    created = set(detection.created)
    for p in changed:
        log.add(
            "pattern_detected" if p.pk in created else "pattern_updated",
            p.description,
            pattern=p.pk,
            action=p.action.name,
            category=p.category,
            occurrences=p.occurrence_count,
            status=p.status,
        )
    log.add(
        "mistake_detection",
        f"{len(detection.created)} new, {len(detection.updated)} updated patterns",
        records_linked=detection.linked_records,
    )
    summary.update(patterns_new=len(detection.created), patterns_updated=len(detection.updated))


def rules_log(*, log: EpisodeLog, summary: dict, rules, expired: int) -> None:
    for r in rules:
        log.add("rule_created", r.precondition, rule=r.pk, pattern=r.pattern_id, status=r.status, require_review=r.require_review)
    if expired:
        log.add("rules_expired", f"{expired} rule(s) expired", count=expired)
    summary.update(rules_created=len(rules), rules_expired=expired)


def calibration_log(*, log: EpisodeLog, summary: dict, records) -> None:
    overall = records[0]
    log.add(
        "calibration",
        f"ECE {overall.ece if overall.ece is None else round(overall.ece, 4)} over {overall.sample_count} "
        f"counted samples; adjustment {overall.recommended_adjustment:+.3f}",
        record=overall.pk,
        ece=overall.ece,
        samples=overall.sample_count,
        adjustment=overall.recommended_adjustment,
        per_action_records=len(records) - 1,
    )
    summary.update(
        ece=None if overall.ece is None else round(overall.ece, 4), calibration_adjustment=overall.recommended_adjustment
    )


def evaluation_log(*, log: EpisodeLog, summary: dict, due: bool, evaluated: list, proposed: list, skipped_open: list) -> None:
    for t in proposed:
        log.add(
            "transition_proposed", t.reason, transition=t.pk, action=t.action.name, from_level=t.from_level, to_level=t.to_level
        )
    message = (
        f"{len(evaluated)} action(s) evaluated, {len(proposed)} transition(s) proposed"
        if due
        else f"skipped: every action was evaluated in the last {settings.AUTONOMY_EVALUATION_INTERVAL_S} s"
    )
    log.add("autonomy_evaluation", message, evaluated=evaluated[:50], open_already=[r["action"] for r in skipped_open])
    summary.update(actions_evaluated=len(evaluated), transitions_proposed=len(proposed))
    log.add("summary", "cycle completed", **summary)


def _autonomy_cycle_steps(*, agent_id: int, trigger: str, force_autonomy: bool, episode: Episode | None) -> Episode:
    fresh = episode is None
    episode = episode_start(agent_id=agent_id, trigger=trigger) if fresh else episode
    log = EpisodeLog(episode, seq=0 if fresh else None)  # a given episode: after the events it has
    summary: dict = {}
    try:
        # rules past their expiry first: a mistake that recurred after one reopens its pattern, and gets a new rule,
        # in this cycle
        expired = correction_rules_expire(agent_id=agent_id)
        detection = mistake_patterns_detect(agent_id=agent_id)
        detection_log(log=log, summary=summary, detection=detection, changed=patterns_by_ids(ids=detection.pattern_ids))
        rules = correction_rules_create(agent_id=agent_id)
        rules_log(log=log, summary=summary, rules=rules, expired=expired)
        log.flush()
        calibration_log(log=log, summary=summary, records=calibration_compute(agent_id=agent_id, episode=episode))
        due = force_autonomy or (  # in the agent's tenant, whatever scope the caller runs in (a command: all)
            Action.objects.filter(_evaluation_due_q(timezone.now()), tenant_id=episode.tenant_id).exists()
        )
        evaluation = (
            autonomy_evaluate(
                action_ids=agent_action_ids(
                    agent_id=agent_id, since=timezone.now() - timedelta(days=settings.AUTONOMY_WINDOW_DAYS)
                ),
                episode=episode,
                force=force_autonomy,
            )
            if due
            else {"evaluated": [], "proposed": [], "skipped_open": []}
        )
        evaluation_log(
            log=log,
            summary=summary,
            due=due,
            evaluated=evaluation["evaluated"],
            proposed=evaluation["proposed"],
            skipped_open=evaluation["skipped_open"],
        )
        log.flush()
        return episode_finish(episode=episode, summary=summary)
    except Exception as exc:
        logger.exception("autonomy cycle for agent %s failed", agent_id)
        log._pending = []
        log.add("failed", f"{exc.__class__.__name__}: {exc}")
        log.flush()
        episode_finish(episode=episode, summary={**summary, "error": str(exc)}, status=EpisodeStatus.FAILED)
        raise
