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
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from autonomy.models import Episode, EpisodeEvent, EpisodeStatus
from autonomy.services.calibration import calibration_compute_for_agents
from autonomy.services.cycle import calibration_log, detection_log, evaluation_log, rules_log
from autonomy.services.episodes import EpisodeLog, agents_cycle_lock, asynchronous_commit
from autonomy.services.evaluation import autonomy_evaluate_for_agents
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


def autonomy_cycles_run(*, agent_ids: list[int], trigger: str = "command", force_autonomy: bool = False) -> CycleSetResult:
    """Run the autonomy cycle for every agent in ``agent_ids`` at once; one episode per agent it could lock."""
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
        with asynchronous_commit():
            result.episodes = _cycle_set_steps(agent_ids=acquired, trigger=trigger, force_autonomy=force_autonomy)
    return result


def _cycle_set_steps(*, agent_ids: list[int], trigger: str, force_autonomy: bool) -> list[Episode]:
    episodes = Episode.objects.bulk_create([Episode(agent_id=a, trigger=trigger) for a in agent_ids])
    by_agent = {e.agent_id: e for e in episodes}
    logs = {a: EpisodeLog(by_agent[a], seq=0) for a in agent_ids}
    summaries: dict[int, dict] = {a: {} for a in agent_ids}
    try:
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
        return episodes
    except Exception as exc:
        logger.exception("set-based autonomy cycle for %s agent(s) failed", len(agent_ids))
        events = []
        for a in agent_ids:
            logs[a]._pending = []
            logs[a].add("failed", f"{exc.__class__.__name__}: {exc}")
            events.extend(logs[a]._pending)
            summaries[a] = {**summaries[a], "error": str(exc)}
        EpisodeEvent.objects.bulk_create(events, batch_size=5000)
        _finish(episodes, summaries, EpisodeStatus.FAILED)
        raise


def _finish(episodes: list[Episode], summaries: dict[int, dict], status: str) -> None:
    now = timezone.now()
    for e in episodes:
        summary = summaries[e.agent_id]
        e.status, e.finished_at, e.summary = status, now, summary
        e.summary_text = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summary.items() if not isinstance(v, (dict, list)))
    Episode.objects.bulk_update(episodes, ["status", "finished_at", "summary", "summary_text"], batch_size=1000)
