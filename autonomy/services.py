"""Calibration, autonomy evaluation and transitions, and the autonomy cycle."""

import contextlib
import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from actions.models import Action, AutonomyLevel
from actions.services import actions_claim_for_evaluation
from agents.models import Agent
from autonomy import calibration as calib
from autonomy.models import AutonomyTransition, CalibrationRecord, Episode, EpisodeEvent, EpisodeStatus, TransitionStatus
from common.api import ApplicationError, Conflict, NotFound
from feedback.selectors import agent_action_ids, outcome_confidence_buckets, outcome_rates, patterns_by_ids, recent_patterns
from feedback.services.mistakes import mistake_patterns_detect
from feedback.services.rules import correction_rules_create, correction_rules_expire

# --- Calibration ---

logger = logging.getLogger(__name__)

LOCK_NAMESPACE_CYCLE = 61002


def _window(window_days, default: int) -> int:
    days = default if window_days is None else window_days
    if isinstance(days, bool) or not isinstance(days, int) or days <= 0:
        raise ApplicationError("The window must be a positive number of days.", field="window_days")
    return days


def calibration_compute(*, agent_id: int, window_days: int | None = None, episode=None) -> list[CalibrationRecord]:
    """Calibrate one agent overall and per action; one aggregate query, one insert.

    Samples: proposals (completed = success; rejected or failed = failure) and
    executions (reviewed correct = success; reviewed incorrect = failure;
    unreviewed = its own success flag). The first record returned is the overall one.
    """

    days = _window(window_days, settings.CALIBRATION_WINDOW_DAYS)
    if not Agent.objects.filter(pk=agent_id).exists():
        raise NotFound(f"Agent {agent_id} not found.", field="agent")
    edges = list(settings.CALIBRATION_BUCKETS)
    rows = outcome_confidence_buckets(agent_id=agent_id, since=timezone.now() - timedelta(days=days), inner_edges=edges[1:-1])
    groups: dict[int | None, dict[int, tuple[int, float, float]]] = {}
    for overall, action_id, bucket, n, conf, ok in rows:
        key = None if overall else action_id
        groups.setdefault(key, {})[min(int(bucket), len(edges) - 2)] = (n, float(conf), float(ok))
    groups.setdefault(None, {})
    previous = dict(
        CalibrationRecord.objects.filter(agent_id=agent_id)
        .order_by("action_id", "-computed_at", "-id")
        .distinct("action_id")
        .values_list("action_id", "recommended_adjustment")
    )
    records = []
    for action_id in sorted(groups, key=lambda k: (k is not None, k or 0)):
        buckets = calib.build_buckets(edges, groups[action_id], settings.CALIBRATION_MIN_BUCKET_SAMPLES)
        s = calib.summarize(
            buckets, ece_threshold=settings.CALIBRATION_ECE_THRESHOLD, max_adjustment=settings.CALIBRATION_MAX_ADJUSTMENT
        )
        records.append(
            CalibrationRecord(
                agent_id=agent_id,
                action_id=action_id,
                window_days=days,
                sample_count=s.sample_count,
                total_samples=s.total_samples,
                buckets=[b.as_dict() for b in s.buckets],
                mean_confidence=s.mean_confidence,
                mean_success=s.mean_success,
                ece=s.ece,
                overconfidence_rate=s.overconfidence_rate,
                underconfidence_rate=s.underconfidence_rate,
                raw_adjustment=round(s.raw_adjustment, 6),
                recommended_adjustment=calib.ema(
                    previous.get(action_id),
                    s.raw_adjustment,
                    alpha=settings.CALIBRATION_EMA_ALPHA,
                    cap=settings.CALIBRATION_MAX_ADJUSTMENT,
                ),
                episode=episode,
            )
        )
    with transaction.atomic():
        CalibrationRecord.objects.bulk_create(records)
    return records


# --- Autonomy evaluation and transitions ---


def autonomy_decision(*, level: int, samples: int, success_rate: float, rejection_rate: float) -> int | None:
    """The level an action should move to, or None. Pure, so the threshold edges are easy to test."""
    if (
        level < AutonomyLevel.AUTONOMOUS
        and samples > settings.AUTONOMY_PROMOTE_MIN_SAMPLES
        and success_rate > settings.AUTONOMY_PROMOTE_MIN_SUCCESS
        and rejection_rate < settings.AUTONOMY_PROMOTE_MAX_REJECTION
    ):
        return level + 1
    if (
        level > AutonomyLevel.PROPOSE
        and samples >= max(1, settings.AUTONOMY_DEMOTE_MIN_SAMPLES)
        and (success_rate < settings.AUTONOMY_DEMOTE_BELOW_SUCCESS or rejection_rate > settings.AUTONOMY_DEMOTE_ABOVE_REJECTION)
    ):
        return level - 1
    return None


def _evaluation_due_q(now) -> Q:
    return Q(last_evaluated_at__isnull=True) | Q(
        last_evaluated_at__lt=now - timedelta(seconds=settings.AUTONOMY_EVALUATION_INTERVAL_S)
    )


def autonomy_evaluate(
    *, action_ids: list[int] | None = None, window_days: int | None = None, episode=None, force: bool = False
) -> dict:
    """Evaluate actions and PROPOSE transitions with evidence; never changes a level.

    Proposals count as success when completed as proposed, as rejection when
    rejected or modified by a reviewer; executions as success when reviewed
    correct (or unreviewed and successful), as rejection when reviewed incorrect.
    Each action is evaluated at most once per ``AUTONOMY_EVALUATION_INTERVAL_S``
    (claimed atomically, so parallel cycles share the work) unless ``force``.
    An action with an open transition gets no second one (partial unique index).
    """
    days = _window(window_days, settings.AUTONOMY_WINDOW_DAYS)
    now = timezone.now()
    qs = Action.objects.all() if action_ids is None else Action.objects.filter(pk__in=action_ids)
    if not force:
        qs = qs.filter(_evaluation_due_q(now))
    ids = list(qs.values_list("pk", flat=True))
    if not ids:
        return {"evaluated": [], "proposed": [], "skipped_open": []}
    claimed = Action.objects.filter(pk__in=ids)
    if not force:
        claimed = claimed.filter(_evaluation_due_q(now))
    ids = actions_claim_for_evaluation(actions=claimed, now=now)  # a parallel cycle gets the rest or nothing
    if not ids:
        return {"evaluated": [], "proposed": [], "skipped_open": []}
    stats = outcome_rates(action_ids=ids, since=now - timedelta(days=days))
    actions = {a.pk: a for a in Action.objects.filter(pk__in=ids)}
    open_ids = set(
        AutonomyTransition.objects.filter(action_id__in=ids, status=TransitionStatus.PROPOSED).values_list("action_id", flat=True)
    )
    latest_ece = {
        a: (ece, agent)
        for a, ece, agent in CalibrationRecord.objects.filter(action_id__in=ids, ece__isnull=False)
        .order_by("action_id", "-computed_at", "-id")
        .distinct("action_id")
        .values_list("action_id", "ece", "agent__name")
    }
    evaluated, proposed, skipped = [], [], []
    for action_id in ids:
        action = actions[action_id]
        n, ok, rej = stats.get(action_id, (0, 0, 0))
        success_rate = ok / n if n else 0.0
        rejection_rate = rej / n if n else 0.0
        target = autonomy_decision(
            level=action.autonomy_level, samples=n, success_rate=success_rate, rejection_rate=rejection_rate
        )
        row = {
            "action": action.name,
            "level": action.autonomy_level,
            "samples": n,
            "success_rate": round(success_rate, 4),
            "rejection_rate": round(rejection_rate, 4),
            "target_level": target,
        }
        evaluated.append(row)
        if target is None:
            continue
        if action_id in open_ids:
            skipped.append(row)
            continue
        patterns = recent_patterns(action_id=action_id, since=now - timedelta(days=days))
        ece = latest_ece.get(action_id)
        evidence = {
            "window_days": days,
            "sample_size": n,
            "successes": ok,
            "rejections": rej,
            "success_rate": round(success_rate, 4),
            "rejection_rate": round(rejection_rate, 4),
            "thresholds": {
                "promote_success_above": settings.AUTONOMY_PROMOTE_MIN_SUCCESS,
                "promote_rejection_below": settings.AUTONOMY_PROMOTE_MAX_REJECTION,
                "promote_samples_above": settings.AUTONOMY_PROMOTE_MIN_SAMPLES,
                "demote_success_below": settings.AUTONOMY_DEMOTE_BELOW_SUCCESS,
                "demote_rejection_above": settings.AUTONOMY_DEMOTE_ABOVE_REJECTION,
                "demote_samples_min": settings.AUTONOMY_DEMOTE_MIN_SAMPLES,
            },
            "recent_patterns": [{**p, "agent": p.pop("agent__name")} for p in patterns],
            "latest_ece": None if ece is None else {"ece": round(ece[0], 4), "agent": ece[1]},
            "evaluated_at": now.isoformat(),
        }
        direction = "promotion" if target > action.autonomy_level else "demotion"
        reason = (
            f"{direction} {action.autonomy_level}→{target}: success {success_rate:.1%}, "
            f"rejection {rejection_rate:.1%} over {n} samples in {days} days"
        )
        try:
            with transaction.atomic():
                t = AutonomyTransition.objects.create(
                    action=action,
                    from_level=action.autonomy_level,
                    to_level=target,
                    evidence=evidence,
                    reason=reason,
                    episode=episode,
                )
        except IntegrityError:  # another evaluation opened one meanwhile
            skipped.append(row)
            continue
        proposed.append(t)
    return {"evaluated": evaluated, "proposed": proposed, "skipped_open": skipped}


def _transition_locked(transition) -> AutonomyTransition:
    pk = transition.pk if hasattr(transition, "pk") else int(transition)
    obj = AutonomyTransition.objects.select_for_update().filter(pk=pk).first()
    if obj is None:
        raise NotFound(f"Transition {pk} not found.", field="id")
    if obj.status != TransitionStatus.PROPOSED:
        raise Conflict(
            f"Transition {obj.pk} is {obj.status}; only proposed transitions can be decided.",
            field="status",
            code="invalid_transition",
            extra={"current_status": obj.status},
        )
    return obj


def autonomy_transition_approve(*, transition, user=None, key=None, notes: str = "") -> AutonomyTransition:
    """Apply the new level and mark the transition applied, in one transaction, exactly once.

    Both rows are locked (SELECT … FOR UPDATE), so of two concurrent approvals the
    second sees ``applied`` and gets 409. Refused if the level changed since the proposal.
    """
    with transaction.atomic():
        obj = _transition_locked(transition)
        action = Action.objects.select_for_update().get(pk=obj.action_id)
        if action.autonomy_level != obj.from_level:
            raise Conflict(
                f"The level of {action.name} changed since this transition was proposed "
                f"(now {action.autonomy_level}, proposed from {obj.from_level}); reject it and evaluate again.",
                field="from_level",
                code="level_changed",
                extra={"current_level": action.autonomy_level},
            )
        now = timezone.now()
        obj.status, obj.decided_by, obj.decided_by_key, obj.decided_at = TransitionStatus.APPLIED, user, key, now
        obj.decision_notes = (notes or "").strip()[:5000]
        obj._history_user = user
        obj.save(update_fields=["status", "decided_by", "decided_by_key", "decided_at", "decision_notes"])
        action.autonomy_level = obj.to_level
        action._history_user = user
        action._change_reason = f"autonomy transition #{obj.pk} approved by {obj.decided_by_label}"
        action.save(update_fields=["autonomy_level"])
    logger.info("autonomy of %s: %s → %s (transition %s)", action.name, obj.from_level, obj.to_level, obj.pk)
    return obj


def autonomy_transition_reject(*, transition, user=None, key=None, notes: str = "") -> AutonomyTransition:
    with transaction.atomic():
        obj = _transition_locked(transition)
        obj.status, obj.decided_by, obj.decided_by_key, obj.decided_at = TransitionStatus.REJECTED, user, key, timezone.now()
        obj.decision_notes = (notes or "").strip()[:5000]
        obj._history_user = user
        obj.save(update_fields=["status", "decided_by", "decided_by_key", "decided_at", "decision_notes"])
    return obj


# --- Cycle episodes and cycles ---


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


@contextlib.contextmanager
def agent_cycle_lock(agent_id: int):
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


def autonomy_cycle_run(*, agent_id: int, trigger: str = "command", force_autonomy: bool = False) -> Episode | None:
    """Detect mistakes, create rules for new patterns, calibrate, evaluate autonomy: one episode.

    Returns None when another worker is running this agent's cycle (advisory lock).
    """

    if not Agent.objects.filter(pk=agent_id).exists():
        raise NotFound(f"Agent {agent_id} not found.", field="agent")
    with agent_cycle_lock(agent_id) as acquired:
        if not acquired:
            logger.info("autonomy cycle for agent %s already running elsewhere; skipped", agent_id)
            return None
        with connection.cursor() as cur:
            # A cycle commits a dozen small transactions; not waiting for each WAL flush makes it
            # several times faster. A crash can lose only the last moments of a cycle, and the
            # next cycle redoes them (every step is idempotent); nothing can be half-written.
            cur.execute("SET synchronous_commit TO off")
        try:
            return _autonomy_cycle_steps(agent_id=agent_id, trigger=trigger, force_autonomy=force_autonomy)
        finally:
            if connection.connection is not None:
                with connection.cursor() as cur:
                    cur.execute("RESET synchronous_commit")


def _autonomy_cycle_steps(*, agent_id: int, trigger: str, force_autonomy: bool) -> Episode:
    episode = episode_start(agent_id=agent_id, trigger=trigger)
    log = EpisodeLog(episode, seq=0)
    summary: dict = {}
    try:
        detection = mistake_patterns_detect(agent_id=agent_id)
        changed = patterns_by_ids(ids=detection.pattern_ids)
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

        rules = correction_rules_create(agent_id=agent_id)
        for r in rules:
            log.add(
                "rule_created", r.precondition, rule=r.pk, pattern=r.pattern_id, status=r.status, require_review=r.require_review
            )
        expired = correction_rules_expire(agent_id=agent_id)
        if expired:
            log.add("rules_expired", f"{expired} rule(s) expired", count=expired)
        log.flush()
        summary.update(rules_created=len(rules), rules_expired=expired)

        records = calibration_compute(agent_id=agent_id, episode=episode)
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

        due = force_autonomy or Action.objects.filter(_evaluation_due_q(timezone.now())).exists()
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
        for t in evaluation["proposed"]:
            log.add(
                "transition_proposed",
                t.reason,
                transition=t.pk,
                action=t.action.name,
                from_level=t.from_level,
                to_level=t.to_level,
            )
        message = (
            f"{len(evaluation['evaluated'])} action(s) evaluated, {len(evaluation['proposed'])} transition(s) proposed"
            if due
            else f"skipped: every action was evaluated in the last {settings.AUTONOMY_EVALUATION_INTERVAL_S} s"
        )
        log.add(
            "autonomy_evaluation",
            message,
            evaluated=evaluation["evaluated"][:50],
            open_already=[r["action"] for r in evaluation["skipped_open"]],
        )
        summary.update(actions_evaluated=len(evaluation["evaluated"]), transitions_proposed=len(evaluation["proposed"]))
        log.add("summary", "cycle completed", **summary)
        log.flush()
        return episode_finish(episode=episode, summary=summary)
    except Exception as exc:
        logger.exception("autonomy cycle for agent %s failed", agent_id)
        log._pending = []
        log.add("failed", f"{exc.__class__.__name__}: {exc}")
        log.flush()
        episode_finish(episode=episode, summary={**summary, "error": str(exc)}, status=EpisodeStatus.FAILED)
        raise
