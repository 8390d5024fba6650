"""Set-based autonomy cycles: every step for a whole set of agents in a handful of statements.

``autonomy_cycles_run(agent_ids=...)`` does for many agents what ``autonomy_cycle_run``
does for one, and records the same per-agent episodes (one Episode per agent, its events
bulk-inserted): detection is one upsert grouped by (agent, action, category), rules one
bulk insert, calibration one GROUPING SETS query over (agent, action, bucket) and
(agent, bucket), autonomy one claim and one rates query for the union of the agents'
actions. The results are those of running the per-agent cycles one after the other in
ascending agent id; the one difference is the ``recent_patterns`` evidence of a proposed
transition, which here already sees the patterns every agent of the set detected.

Each agent is locked with the same advisory lock as the per-agent cycle (try-lock, one
statement for the set): agents another worker is running are skipped, not waited for.

When the set-based run fails (usually one agent's data), what its failing step wrote is rolled back
with that step's transaction (the steps before it committed; every step is idempotent), and its agents
are run again one by one with the per-agent cycle, still under the set's locks, each in the episode the
set-based run started for it (begun again, with a ``chunk_fallback`` event counting what the set had done).
Only the agents whose own cycle fails get a failed episode; the others complete.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from autonomy.models import Episode, EpisodeEvent, EpisodeStatus
from autonomy.services.calibration import calibration_compute_for_agents
from autonomy.services.cycle import autonomy_cycle_run, calibration_log, detection_log, evaluation_log, rules_log
from autonomy.services.episodes import (
    EpisodeLog,
    agents_cycle_lock,
    asynchronous_commit,
    episode_finish,
    episode_restart,
    episode_start,
)
from autonomy.services.evaluation import autonomy_evaluate_for_agents
from common.api import NotFound
from feedback.selectors import agents_action_ids, patterns_by_ids
from feedback.services.agent_sets import (
    correction_rules_create_for_agents,
    correction_rules_expire_for_agents,
    mistake_patterns_detect_for_agents,
)
from feedback.services.mistakes import DetectionResult

logger = logging.getLogger(__name__)


@dataclass
class CycleSetResult:
    episodes: list[Episode] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # agents whose cycle another worker is running
    missing: list[int] = field(default_factory=list)  # ids of no agent
    failed: list[int] = field(default_factory=list)  # agents whose cycle failed (their failed episode says why)


def autonomy_cycles_run(*, agent_ids: list[int], trigger: str = "command", force_autonomy: bool = False) -> CycleSetResult:
    """Run the autonomy cycle for every agent in ``agent_ids`` at once; one episode per agent it could lock. When
    that fails, each agent's cycle runs on its own: only the agents that fail then are ``failed``."""
    wanted = sorted({int(a) for a in agent_ids})
    existing = set(Agent.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    result = CycleSetResult(missing=[a for a in wanted if a not in existing])
    with agents_cycle_lock(agent_ids=[a for a in wanted if a in existing]) as acquired:
        got = set(acquired)
        result.skipped = [a for a in wanted if a in existing and a not in got]
        if result.skipped:
            logger.info("autonomy cycles for %s agent(s) already running elsewhere; skipped", len(result.skipped))
        if not acquired:
            return result
        episodes: list[Episode] = []
        summaries: dict[int, dict] = {a: {} for a in acquired}
        try:
            with asynchronous_commit():
                episodes = Episode.objects.bulk_create([Episode(agent_id=a, trigger=trigger) for a in acquired])
                _cycle_set_steps(episodes=episodes, summaries=summaries, force_autonomy=force_autonomy)
            result.episodes = episodes
        except Exception as exc:
            logger.warning(
                "set-based autonomy cycle for %s agent(s) (#%s to #%s) failed (%s: %s); running them one by one",
                len(acquired),
                acquired[0],
                acquired[-1],
                exc.__class__.__name__,
                exc,
                exc_info=True,
            )
            _cycles_one_by_one(
                result=result, episodes=episodes, summaries=summaries, trigger=trigger, force_autonomy=force_autonomy
            )
    return result


def _cycles_one_by_one(
    *, result: CycleSetResult, episodes: list[Episode], summaries: dict[int, dict], trigger: str, force_autonomy: bool
) -> None:
    """After the set-based run of ``summaries``' agents failed: each agent's per-agent cycle, isolated, in the episode
    the set-based run started for it (begun again) or, when there is none, a new one."""
    agent_ids = list(summaries)
    unfinished = {e.agent_id: e for e in episodes if e.pk is not None}
    for agent_id in agent_ids:
        episode = unfinished.get(agent_id)
        try:
            if episode is not None:
                episode = _episode_restart_after_set(episode=episode, summary=summaries[agent_id], size=len(agent_ids))
            if episode is None:
                episode = episode_start(agent_id=agent_id, trigger=trigger)
            done = autonomy_cycle_run(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy, episode=episode)
        except NotFound:
            result.missing.append(agent_id)  # deleted meanwhile, and its episodes with it
            continue
        except Exception as exc:
            result.failed.append(agent_id)
            if episode is None or episode.status != EpisodeStatus.FAILED:  # not recorded by the per-agent cycle
                logger.exception("autonomy cycle for agent %s failed", agent_id)
                episode = _episode_fail(episode=episode, exc=exc)
            if episode is not None:
                result.episodes.append(episode)
            continue
        if done is None:  # another worker took the agent (this session lost the set's lock): it is that one's now
            result.skipped.append(agent_id)
            if episode is not None:
                Episode.objects.filter(pk=episode.pk, status=EpisodeStatus.RUNNING).delete()
            continue
        result.episodes.append(done)
    logger.info(
        "autonomy cycles of the failed set run one by one: %s completed, %s failed",
        sum(1 for e in result.episodes if e.status == EpisodeStatus.COMPLETED),
        len(result.failed),
    )


def _episode_restart_after_set(*, episode: Episode, summary: dict, size: int) -> Episode | None:
    """The set-based run's episode begun again for the per-agent cycle, its first event counting what the set had
    done (kept: it committed) for this agent; not the set's error, which may be another agent's (another tenant's)."""
    done = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
    text = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in done.items())
    return episode_restart(
        episode=episode,
        kind="chunk_fallback",
        message=f"the set-based cycle of {size} agent(s) failed; this agent's cycle ran again on its own"
        + (f" (done before the failure, kept: {text})" if text else ""),
        chunk_agents=size,
        **done,
    )


def _episode_fail(*, episode: Episode | None, exc: Exception) -> Episode | None:
    """Record ``exc`` in an episode the per-agent cycle could not finish; the database may be what failed."""
    if episode is None:
        return None
    try:
        log = EpisodeLog(episode)
        log.add("failed", f"{exc.__class__.__name__}: {exc}")
        log.flush()
        return episode_finish(episode=episode, summary={"error": str(exc)}, status=EpisodeStatus.FAILED)
    except Exception:
        logger.exception("could not record the failure in episode #%s", episode.pk)
        return episode


def _cycle_set_steps(*, episodes: list[Episode], summaries: dict[int, dict], force_autonomy: bool) -> None:
    """Every step for the agents of ``episodes`` (ascending); the steps' counts go to ``summaries`` as they finish."""
    agent_ids = [e.agent_id for e in episodes]
    by_agent = {e.agent_id: e for e in episodes}
    logs = {a: EpisodeLog(by_agent[a], seq=0) for a in agent_ids}
    expired = correction_rules_expire_for_agents(agent_ids=agent_ids)  # first, as the single-agent cycle does
    detection = mistake_patterns_detect_for_agents(agent_ids=agent_ids)
    changed: dict[int, list] = {}
    for p in patterns_by_ids(ids=[pk for r in detection.values() for pk in r.pattern_ids]):
        changed.setdefault(p.agent_id, []).append(p)
    for a in agent_ids:
        detection_log(
            log=logs[a], summary=summaries[a], detection=detection.get(a, DetectionResult()), changed=changed.get(a, [])
        )

    rules = correction_rules_create_for_agents(agent_ids=agent_ids)
    for a in agent_ids:
        rules_log(log=logs[a], summary=summaries[a], rules=rules.get(a, []), expired=expired.get(a, 0))

    calibration = calibration_compute_for_agents(agent_ids=agent_ids, episodes=by_agent)
    names = dict(Agent.objects.filter(pk__in=agent_ids).values_list("pk", "name"))
    ece_by_agent = {
        a: {r.action_id: (r.ece, names[a]) for r in records[1:] if r.ece is not None} for a, records in calibration.items()
    }
    for a in agent_ids:
        calibration_log(log=logs[a], summary=summaries[a], records=calibration[a])

    evaluation = autonomy_evaluate_for_agents(
        agent_actions=agents_action_ids(
            agent_ids=agent_ids, since=timezone.now() - timedelta(days=settings.AUTONOMY_WINDOW_DAYS)
        ),
        agent_order=agent_ids,
        episodes=by_agent,
        force=force_autonomy,
        ece_by_agent=ece_by_agent,
    )
    for a in agent_ids:
        e = evaluation[a]
        evaluation_log(
            log=logs[a],
            summary=summaries[a],
            due=e.due,
            evaluated=e.evaluated,
            proposed=e.proposed,
            skipped_open=e.skipped_open,
        )

    EpisodeEvent.objects.bulk_create([ev for a in agent_ids for ev in logs[a]._pending], batch_size=5000)
    _finish(episodes, summaries, EpisodeStatus.COMPLETED)


def _finish(episodes: list[Episode], summaries: dict[int, dict], status: str) -> None:
    now = timezone.now()
    for e in episodes:
        summary = summaries[e.agent_id]
        e.status, e.finished_at, e.summary = status, now, summary
        e.summary_text = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summary.items() if not isinstance(v, (dict, list)))
    Episode.objects.bulk_update(episodes, ["status", "finished_at", "summary", "summary_text"], batch_size=1000)
