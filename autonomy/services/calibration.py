"""Calibration: one agent (``calibration_compute``) or many at once (``calibration_compute_for_agents``); a report's
read-only view (``calibration_preview``)."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from autonomy import calibration as calib
from autonomy.models import CalibrationRecord
from common.api import ApplicationError, NotFound
from common.validation import MAX_DAYS
from feedback.selectors import outcome_confidence_buckets, outcome_confidence_buckets_for_agents

Groups = dict[int | None, dict[int, tuple[int, float, float]]]

MAX_WINDOW_DAYS = MAX_DAYS


def _window(window_days, default: int) -> int:
    days = default if window_days is None else window_days
    if isinstance(days, bool) or not isinstance(days, int) or days <= 0:
        raise ApplicationError("The window must be a positive number of days.", field="window_days")
    if days > MAX_WINDOW_DAYS:
        raise ApplicationError(f"The window must be at most {MAX_WINDOW_DAYS} days.", field="window_days")
    return days


def _add_bucket(groups: Groups, overall, action_id, bucket, n, conf, ok, n_buckets: int) -> None:
    key = None if overall else action_id
    groups.setdefault(key, {})[min(int(bucket), n_buckets - 1)] = (n, float(conf), float(ok))


def _records(*, agent_id: int, groups: Groups, latest: dict, days: int, edges: list[float], episode) -> tuple[list, list]:
    """The agent's records, overall first then by action id, from its bucket aggregates, and those of them to insert.

    Every scope the agent has a record for is calibrated again, so an action whose samples all left the window gets
    a record that says so (no counted samples) instead of keeping its last measured adjustment for consult.

    A scope with no counted samples measured nothing: its adjustment is 0 (not the previous one decayed, which
    would be an adjustment with no evidence, and an ECE of none), and the next run that counts samples starts
    afresh from its raw adjustment, as a first run does. A scope that counted samples smooths its raw adjustment
    against its previous measured one (``CALIBRATION_EMA_ALPHA``): a well-calibrated window (raw 0) moves the
    adjustment toward 0 by that step, so one run cannot swing it.

    A scope whose window, buckets and raw adjustment equal its latest record's saw no new evidence: that record
    is answered as it is, so running again on the same data (a second cycle, a redelivered task, a report)
    smooths nothing twice (unless that record carries an adjustment without counted samples, which is replaced)."""
    groups.setdefault(None, {})
    for action_id in latest:
        groups.setdefault(action_id, {})  # its samples left the window: calibrated as empty, not left as it was
    records, new = [], []
    for action_id in sorted(groups, key=lambda k: (k is not None, k or 0)):
        buckets = calib.build_buckets(edges, groups[action_id], settings.CALIBRATION_MIN_BUCKET_SAMPLES)
        s = calib.summarize(
            buckets, ece_threshold=settings.CALIBRATION_ECE_THRESHOLD, max_adjustment=settings.CALIBRATION_MAX_ADJUSTMENT
        )
        stats = [b.as_dict() for b in s.buckets]
        raw = round(s.raw_adjustment, 6)
        previous = latest.get(action_id)
        if (
            previous is not None
            and (previous.window_days, previous.buckets, previous.raw_adjustment) == (days, stats, raw)
            and (previous.sample_count > 0 or previous.recommended_adjustment == 0)
        ):
            records.append(previous)
            continue
        if s.sample_count == 0:
            adjustment = 0.0
        else:
            measured = previous is not None and previous.sample_count > 0
            adjustment = calib.ema(
                previous.recommended_adjustment if measured else None,
                s.raw_adjustment,
                alpha=settings.CALIBRATION_EMA_ALPHA,
                cap=settings.CALIBRATION_MAX_ADJUSTMENT,
            )
        record = CalibrationRecord(
            agent_id=agent_id,
            action_id=action_id,
            window_days=days,
            sample_count=s.sample_count,
            total_samples=s.total_samples,
            buckets=stats,
            mean_confidence=s.mean_confidence,
            mean_success=s.mean_success,
            ece=s.ece,
            overconfidence_rate=s.overconfidence_rate,
            underconfidence_rate=s.underconfidence_rate,
            raw_adjustment=raw,
            recommended_adjustment=adjustment,
            episode=episode,
        )
        records.append(record)
        new.append(record)
    return records, new


def _agent_records(*, agent_id: int, window_days: int | None, episode) -> tuple[list, list]:
    days = _window(window_days, settings.CALIBRATION_WINDOW_DAYS)
    if not Agent.objects.filter(pk=agent_id).exists():
        raise NotFound(f"Agent {agent_id} not found.", field="agent")
    edges = list(settings.CALIBRATION_BUCKETS)
    rows = outcome_confidence_buckets(agent_id=agent_id, since=timezone.now() - timedelta(days=days), inner_edges=edges[1:-1])
    groups: Groups = {}
    for overall, action_id, bucket, n, conf, ok in rows:
        _add_bucket(groups, overall, action_id, bucket, n, conf, ok, len(edges) - 1)
    latest = {
        r.action_id: r
        for r in CalibrationRecord.objects.filter(agent_id=agent_id)
        .order_by("action_id", "-computed_at", "-id")
        .distinct("action_id")
    }
    return _records(agent_id=agent_id, groups=groups, latest=latest, days=days, edges=edges, episode=episode)


def calibration_compute(*, agent_id: int, window_days: int | None = None, episode=None) -> list[CalibrationRecord]:
    """Calibrate one agent overall and per action; one aggregate query, one insert of the scopes with new evidence
    (the others answer their latest record unchanged: the same data gives the same calibration).

    Samples: proposals (completed as proposed = success; rejected, failed or corrected by a reviewer = failure) and
    executions (reviewed correct = success; reviewed incorrect = failure;
    unreviewed = its own success flag). The first record returned is the overall one.

    The records stored are what consult answers and what the next run smooths against: the autonomy cycle calls this
    with the default window (``CALIBRATION_WINDOW_DAYS``). To look at another window, use ``calibration_preview``,
    which stores nothing.
    """

    records, new = _agent_records(agent_id=agent_id, window_days=window_days, episode=episode)
    with transaction.atomic():
        CalibrationRecord.objects.bulk_create(new)
    return records


def calibration_preview(*, agent_id: int, window_days: int | None = None) -> list[CalibrationRecord]:
    """``calibration_compute`` without storing anything: what a calibration over ``window_days`` (default
    ``CALIBRATION_WINDOW_DAYS``) measures now, overall first. A scope with no new evidence answers its latest stored
    record; the others are unsaved records (no id).

    For reports: looking at calibration, over any window, never changes what consult answers or what the next cycle
    smooths against."""

    records, _new = _agent_records(agent_id=agent_id, window_days=window_days, episode=None)
    return records


def calibration_compute_for_agents(*, agent_ids: list[int], episodes: dict | None = None) -> dict[int, list[CalibrationRecord]]:
    """``calibration_compute`` for many agents: one GROUPING SETS query (agent, action, bucket) + (agent, bucket),
    one query for the latest records, one insert (as there, only of scopes with new evidence). Answers agent id -> its records, overall first."""

    days = settings.CALIBRATION_WINDOW_DAYS
    ids = sorted({int(a) for a in agent_ids})
    edges = list(settings.CALIBRATION_BUCKETS)
    rows = outcome_confidence_buckets_for_agents(
        agent_ids=ids, since=timezone.now() - timedelta(days=days), inner_edges=edges[1:-1]
    )
    groups: dict[int, Groups] = {a: {} for a in ids}
    for agent_id, overall, action_id, bucket, n, conf, ok in rows:
        _add_bucket(groups[agent_id], overall, action_id, bucket, n, conf, ok, len(edges) - 1)
    latest: dict[int, dict] = {a: {} for a in ids}
    for r in (
        CalibrationRecord.objects.filter(agent_id__in=ids)
        .order_by("agent_id", "action_id", "-computed_at", "-id")
        .distinct("agent_id", "action_id")
    ):
        latest[r.agent_id][r.action_id] = r
    episodes = episodes or {}
    out, new = {}, []
    for a in ids:
        out[a], created = _records(
            agent_id=a, groups=groups[a], latest=latest[a], days=days, edges=edges, episode=episodes.get(a)
        )
        new.extend(created)
    with transaction.atomic():
        CalibrationRecord.objects.bulk_create(new, batch_size=5000)
    return out
