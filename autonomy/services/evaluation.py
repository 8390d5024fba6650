"""Autonomy evaluation (per action, for one agent's actions or for many agents' at once) and transitions."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from actions.models import Action, AutonomyLevel
from actions.services import actions_claim_for_evaluation
from agents.models import Agent
from autonomy.models import AutonomyTransition, CalibrationRecord, TransitionStatus
from autonomy.services.calibration import _window
from common.api import ApplicationError, Conflict, Forbidden, NotFound
from feedback.selectors import outcome_rates, recent_patterns

logger = logging.getLogger(__name__)


def autonomy_level_decide(*, level: int, samples: int, success_rate: float, rejection_rate: float) -> int | None:
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


@dataclass
class _Outcome:
    action_id: int
    row: dict
    transition: AutonomyTransition | None = None
    skipped_open: bool = False


@dataclass
class AgentEvaluation:
    """What one agent's evaluation step reports (the same lists ``autonomy_evaluate`` answers)."""

    due: bool
    evaluated: list[dict] = field(default_factory=list)
    proposed: list[AutonomyTransition] = field(default_factory=list)
    skipped_open: list[dict] = field(default_factory=list)


def _evaluate_claimed(*, ids: list[int], now, days: int, episode_of, ece_of=None, ece_skip_episodes=()) -> dict[int, _Outcome]:
    """Evaluate claimed actions (ascending id) and propose transitions; ``episode_of(action_id)`` names the episode
    a transition belongs to, ``ece_of(action_id)`` may answer the latest (ece, agent name) before the database does
    (whose records of ``ece_skip_episodes`` are then left out)."""
    stats = outcome_rates(action_ids=ids, since=now - timedelta(days=days))
    actions = {a.pk: a for a in Action.objects.filter(pk__in=ids)}
    open_by_action = {
        t.action_id: t for t in AutonomyTransition.objects.filter(action_id__in=ids, status=TransitionStatus.PROPOSED)
    }
    latest_ece = {
        a: (ece, agent)
        for a, ece, agent in CalibrationRecord.objects.filter(action_id__in=ids, ece__isnull=False)
        .exclude(episode_id__in=list(ece_skip_episodes))
        .order_by("action_id", "-computed_at", "-id")
        .distinct("action_id")
        .values_list("action_id", "ece", "agent__name")
    }
    out: dict[int, _Outcome] = {}
    for action_id in ids:
        action = actions[action_id]
        n, ok, rej = stats.get(action_id, (0, 0, 0))
        success_rate = ok / n if n else 0.0
        rejection_rate = rej / n if n else 0.0
        target = autonomy_level_decide(
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
        outcome = out[action_id] = _Outcome(action_id, row)
        open_row = open_by_action.get(action_id)
        if open_row is not None and _superseded(open_row, level=action.autonomy_level, target=target, days=days):
            _transition_supersede(open_row, now=now, target=target, row=row)
            open_row = None
        if target is None:
            continue
        if open_row is not None:
            outcome.skipped_open = True
            continue
        patterns = recent_patterns(action_id=action_id, since=now - timedelta(days=days))
        ece = (ece_of(action_id) if ece_of else None) or latest_ece.get(action_id)
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
                # the level read above may have changed since (an emergency stop, an approval): every writer of the
                # level locks the action, so this proposal is made from the level it has, or not at all
                if Action.objects.select_for_update().filter(pk=action_id).values_list("autonomy_level", flat=True).first() != (
                    action.autonomy_level
                ):
                    row["skipped"] = "the level changed during the evaluation; the next one proposes from the new level"
                    continue
                outcome.transition = AutonomyTransition.objects.create(
                    action=action,
                    from_level=action.autonomy_level,
                    to_level=target,
                    evidence=evidence,
                    reason=reason,
                    episode=episode_of(action_id),
                )
        except IntegrityError:  # another evaluation opened one meanwhile
            outcome.skipped_open = True
    return out


def _superseded(open_row: AutonomyTransition, *, level: int, target: int | None, days: int) -> bool:
    """Whether the evidence of this evaluation leaves an open proposal behind: the level changed since it was
    made; or, judged over the window it was proposed on (an evaluation over another window, such as a report's,
    leaves it alone), a promotion the evidence no longer calls for (no change due, or another level), or a
    demotion when a different change is due (a demotion no longer due stays open: lowering autonomy is the safe
    side)."""
    if open_row.from_level != level:
        return True
    if not isinstance(open_row.evidence, dict) or open_row.evidence.get("window_days") != days:
        return False
    if open_row.to_level > level:
        return target != open_row.to_level
    return target is not None and target != open_row.to_level


def _transition_supersede(open_row: AutonomyTransition, *, now, target: int | None, row: dict) -> None:
    """Reject an open proposal the new evidence leaves behind (nobody decided it: ``decided_by`` stays empty), with
    the action locked first, as every writer of its level locks it; one a reviewer decided meanwhile is left."""
    with transaction.atomic():
        Action.objects.select_for_update().filter(pk=open_row.action_id).first()
        locked = AutonomyTransition.objects.select_for_update().filter(pk=open_row.pk, status=TransitionStatus.PROPOSED).first()
        if locked is None:
            return
        due = "no change" if target is None else f"level {target}"
        locked.status, locked.decided_at = TransitionStatus.REJECTED, now
        locked.decision_notes = (
            f"superseded by the evaluation of {now:%Y-%m-%d %H:%M} UTC: {due} is due (level {row['level']}, success "
            f"{row['success_rate']:.1%}, rejection {row['rejection_rate']:.1%} over {row['samples']} samples)"
        )
        locked.save(update_fields=["status", "decided_at", "decision_notes"])
    logger.info("autonomy transition %s of %s superseded: %s is due", open_row.pk, row["action"], due)


def _claim(ids: list[int], *, now, force: bool) -> list[int]:
    qs = Action.objects.filter(pk__in=ids)
    if not force:
        qs = qs.filter(_evaluation_due_q(now))
    if not qs.exists():
        return []
    return actions_claim_for_evaluation(actions=qs, now=now)  # a parallel cycle gets the rest or nothing


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
    if action_ids is None:
        action_ids = list(Action.objects.values_list("pk", flat=True))
    ids = _claim(action_ids, now=now, force=force)
    if not ids:
        return {"evaluated": [], "proposed": [], "skipped_open": []}
    outcomes = _evaluate_claimed(ids=ids, now=now, days=days, episode_of=lambda _a: episode)
    return {
        "evaluated": [o.row for o in outcomes.values()],
        "proposed": [o.transition for o in outcomes.values() if o.transition is not None],
        "skipped_open": [o.row for o in outcomes.values() if o.skipped_open],
    }


def autonomy_evaluate_for_agents(
    *, agent_actions: dict[int, list[int]], agent_order: list[int], episodes: dict, force: bool = False, ece_by_agent=None
) -> dict[int, AgentEvaluation]:
    """The evaluation step of many agents' cycles at once, answering per agent what running their cycles one after
    the other in ``agent_order`` would have: one claim for the union of their actions; an action goes to the first
    agent that has it (its episode owns the transition); with ``force`` every agent reports all its actions and a
    later agent finds the transition an earlier one opened (``skipped_open``). ``ece_by_agent`` maps agent ->
    action -> (ece, agent name) of calibration records this run wrote, which count as the latest."""
    days = settings.AUTONOMY_WINDOW_DAYS
    now = timezone.now()
    union = sorted({a for acts in agent_actions.values() for a in acts})
    # what each agent's own cycle would count, in its tenant's scope: the actions of its tenant still due
    tenant_of = dict(Agent.objects.filter(pk__in=agent_order).values_list("pk", "tenant_id"))
    remaining_due = dict(
        Action.objects.filter(_evaluation_due_q(now), tenant_id__in=set(tenant_of.values()))
        .order_by()
        .values("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )
    claimed = _claim(union, now=now, force=force) if union and (force or any(remaining_due.values())) else []
    owner: dict[int, int] = {}
    for agent_id in agent_order:
        for action_id in agent_actions.get(agent_id, []):
            owner.setdefault(action_id, agent_id)
    ece_by_agent = ece_by_agent or {}
    outcomes = (
        _evaluate_claimed(
            ids=claimed,
            now=now,
            days=days,
            episode_of=lambda a: episodes.get(owner[a]),
            ece_of=lambda a: ece_by_agent.get(owner[a], {}).get(a),
            ece_skip_episodes=[e.pk for e in episodes.values()],
        )
        if claimed
        else {}
    )
    out: dict[int, AgentEvaluation] = {}
    claimed_set = set(claimed)
    for agent_id in agent_order:
        tenant = tenant_of.get(agent_id)
        result = out[agent_id] = AgentEvaluation(due=force or remaining_due.get(tenant, 0) > 0)
        for action_id in agent_actions.get(agent_id, []):
            if action_id not in claimed_set or not (force or owner[action_id] == agent_id):
                continue
            o = outcomes[action_id]
            result.evaluated.append(o.row)
            if owner[action_id] == agent_id and o.transition is not None:
                result.proposed.append(o.transition)
            elif o.skipped_open or (o.transition is not None and o.row["target_level"] is not None):
                result.skipped_open.append(o.row)
            if owner[action_id] == agent_id and not force:
                remaining_due[tenant] = remaining_due.get(tenant, 0) - 1
    return out


def _transition_locked(transition) -> tuple[AutonomyTransition, Action]:
    """Lock a proposed transition and its action, in the one order every writer of an action's level takes: the
    action row first, then its transitions (as the emergency stop and the revert do), so a decision and a stop or
    revert of the same action wait for each other instead of deadlocking. The states are read after the locks."""
    pk = transition.pk if hasattr(transition, "pk") else int(transition)
    action_id = AutonomyTransition.objects.filter(pk=pk).values_list("action_id", flat=True).first()
    action = Action.objects.select_for_update().filter(pk=action_id).first() if action_id is not None else None
    obj = AutonomyTransition.objects.select_for_update().filter(pk=pk).first() if action is not None else None
    if obj is None:
        raise NotFound(f"Transition {pk} not found.", field="id")
    if obj.status != TransitionStatus.PROPOSED:
        raise Conflict(
            f"Transition {obj.pk} is {obj.status}; only proposed transitions can be decided.",
            field="status",
            code="invalid_transition",
            extra={"current_status": obj.status},
        )
    return obj, action


APPROVE_PERMISSION = "autonomy.approve_autonomytransition"


def _check_human(user) -> None:
    """Every autonomy change is decided by a human with the permission, never by an agent's key."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.has_perm(APPROVE_PERMISSION):
        raise Forbidden(f"Only a reviewer with the permission {APPROVE_PERMISSION} decides autonomy transitions.", field="user")


def autonomy_transition_approve(*, transition, user, notes: str = "") -> AutonomyTransition:
    """Apply the new level and mark the transition applied, in one transaction, exactly once.

    Both rows are locked (SELECT … FOR UPDATE; the action first, as a stop or a revert locks it), so of two
    concurrent approvals the second sees ``applied`` and gets 409, and one after a stop sees the transition it
    superseded (409). Refused if the level changed since the proposal, and a promotion proposed from evidence is
    refused when the evidence of now (the same window) no longer calls for it (409 ``evidence_changed``, with the
    rates of now): more autonomy is granted on what holds when it is granted.
    """
    _check_human(user)
    with transaction.atomic():
        obj, action = _transition_locked(transition)
        if action.autonomy_level != obj.from_level:
            raise Conflict(
                f"The level of {action.name} changed since this transition was proposed "
                f"(now {action.autonomy_level}, proposed from {obj.from_level}); reject it and evaluate again.",
                field="from_level",
                code="level_changed",
                extra={"current_level": action.autonomy_level},
            )
        if obj.to_level > obj.from_level and isinstance(obj.evidence, dict) and "sample_size" in obj.evidence:
            _promotion_evidence_check(obj, action)
        now = timezone.now()
        obj.status, obj.decided_by, obj.decided_at = TransitionStatus.APPLIED, user, now
        obj.decision_notes = (notes or "").strip()[:5000]
        obj._history_user = user
        obj.save(update_fields=["status", "decided_by", "decided_at", "decision_notes"])
        action.autonomy_level = obj.to_level
        action._history_user = user
        action._change_reason = f"autonomy transition #{obj.pk} approved by {obj.decided_by_label}"
        action.save(update_fields=["autonomy_level"])
    logger.info("autonomy of %s: %s → %s (transition %s)", action.name, obj.from_level, obj.to_level, obj.pk)
    return obj


def _promotion_evidence_check(obj: AutonomyTransition, action: Action) -> None:
    days = obj.evidence.get("window_days")
    days = days if isinstance(days, int) and days > 0 else settings.AUTONOMY_WINDOW_DAYS
    n, ok, rej = outcome_rates(action_ids=[action.pk], since=timezone.now() - timedelta(days=days)).get(action.pk, (0, 0, 0))
    success, rejection = (ok / n, rej / n) if n else (0.0, 0.0)
    target = autonomy_level_decide(level=action.autonomy_level, samples=n, success_rate=success, rejection_rate=rejection)
    if target != obj.to_level:
        raise Conflict(
            f"The evidence for promoting {action.name} no longer holds: success {success:.1%}, rejection {rejection:.1%} "
            f"over {n} samples in {days} days now ({'no change' if target is None else f'level {target}'} is due); "
            "reject it and evaluate again.",
            field="evidence",
            code="evidence_changed",
            extra={
                "samples": n,
                "success_rate": round(success, 4),
                "rejection_rate": round(rejection, 4),
                "target_level": target,
            },
        )


def autonomy_transition_reject(*, transition, user, notes: str = "") -> AutonomyTransition:
    _check_human(user)
    with transaction.atomic():
        obj, _action = _transition_locked(transition)
        obj.status, obj.decided_by, obj.decided_at = TransitionStatus.REJECTED, user, timezone.now()
        obj.decision_notes = (notes or "").strip()[:5000]
        obj._history_user = user
        obj.save(update_fields=["status", "decided_by", "decided_at", "decision_notes"])
    return obj


def _action_locked(action) -> Action:
    pk = action.pk if hasattr(action, "pk") else int(action)
    row = Action.objects.select_for_update().filter(pk=pk).first()
    if row is None:
        raise NotFound(f"Action {pk} not found.", field="action")
    return row


def _open_transitions_reject(row: Action, *, user, reason: str, why: str) -> list[AutonomyTransition]:
    """With the action locked: reject its open proposals as superseded by what ``user`` did (``why``)."""
    rejected = []
    for open_row in AutonomyTransition.objects.select_for_update().filter(action=row, status=TransitionStatus.PROPOSED):
        open_row.status, open_row.decided_by, open_row.decided_at = TransitionStatus.REJECTED, user, timezone.now()
        open_row.decision_notes = f"superseded by {why}: {reason}"[:5000]
        open_row._history_user = user
        open_row.save(update_fields=["status", "decided_by", "decided_at", "decision_notes"])
        rejected.append(open_row)
    return rejected


def _level_set_now(row: Action, *, to_level: int, user, reason: str, evidence: dict, why: str) -> AutonomyTransition:
    """Inside the caller's transaction, with the action locked (before its transitions: the one lock order): set its
    level at once as ``user`` decided, record it as an applied transition, and reject an open proposal for the action
    as superseded (``why`` names what did)."""
    now = timezone.now()
    _open_transitions_reject(row, user=user, reason=reason, why=why)
    applied = AutonomyTransition(
        action=row,
        from_level=row.autonomy_level,
        to_level=to_level,
        status=TransitionStatus.APPLIED,
        evidence=evidence,
        reason=reason[:5000],
        decided_by=user,
        decided_at=now,
        decision_notes=reason[:5000],
    )
    applied._history_user = user
    applied.save()
    row.autonomy_level = to_level
    row._history_user = user
    row._change_reason = f"{why} #{applied.pk} by user {user}: {reason}"[:100]
    row.save(update_fields=["autonomy_level"])
    return applied


def _reason_required(reason: str, what: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError(f"Say why the {what}.", field="reason")
    return reason


def action_autonomy_stop(*, action, user, reason: str) -> AutonomyTransition:
    """Emergency stop: the action drops to level 1 (propose only) at once, decided by a human with the permission.

    Recorded as an applied transition (and in the action's history) naming the human and the reason; an open
    proposal for the action is rejected as superseded. At level 1 already, the stop only rejects an open promotion
    (answered: that transition, rejected), and with none open is a 409 ``already_stopped``."""
    _check_human(user)
    reason = _reason_required(reason, "action is stopped")
    with transaction.atomic():
        row = _action_locked(action)
        if row.autonomy_level == AutonomyLevel.PROPOSE:
            # nothing to lower; a promotion still open would raise it again once approved: the stop rejects it
            superseded = _open_transitions_reject(row, user=user, reason=reason, why="emergency stop")
            if not superseded:
                raise Conflict(f"{row.name} already runs at level 1 (propose only).", field="action", code="already_stopped")
            logger.warning("emergency stop of %s (at level 1) by %s rejected its open promotion: %s", row.name, user, reason)
            return superseded[0]
        stop = _level_set_now(
            row, to_level=AutonomyLevel.PROPOSE, user=user, reason=reason, evidence={"emergency_stop": True}, why="emergency stop"
        )
    logger.warning("emergency stop of %s by %s: %s", row.name, user, reason)
    return stop


def action_autonomy_revert(*, action, user, reason: str, revert_of: int | None) -> AutonomyTransition:
    """Undo the last applied change of an action's level (back to the level it had before), decided by a human with
    the permission; recorded as an applied transition that names the one it reverts. ``revert_of`` is the transition
    the human confirmed reverting. Refused when nothing was applied, when the last change is not ``revert_of`` (a
    second submission would revert the revert), or when the level changed since that transition."""
    _check_human(user)
    reason = _reason_required(reason, "level is reverted")
    with transaction.atomic():
        row = _action_locked(action)
        last = (
            AutonomyTransition.objects.filter(action=row, status=TransitionStatus.APPLIED).order_by("-decided_at", "-id").first()
        )
        if last is None:
            raise Conflict(f"No applied change of {row.name}'s level to revert.", field="action", code="nothing_to_revert")
        if revert_of is None or last.pk != revert_of:
            if revert_of is not None and (last.evidence or {}).get("revert_of") == revert_of:
                stamp = timezone.localtime(last.decided_at).strftime("%Y-%m-%d %H:%M") if last.decided_at else "earlier"
                message = (
                    f"Transition #{revert_of} was already reverted by {last.decided_by or 'someone'} at {stamp}: "
                    f"{row.name} is at level {row.autonomy_level}."
                )
            else:
                message = (
                    f"{row.name}'s level changed since the revert was shown: its last change is transition #{last.pk} "
                    f"(level {last.from_level} → {last.to_level}); check it and confirm again."
                )
            raise Conflict(message, field="revert_of", code="changed", extra={"last_transition": last.pk})
        if row.autonomy_level != last.to_level or last.from_level == last.to_level:
            raise Conflict(
                f"{row.name} is at level {row.autonomy_level}, not the level {last.to_level} transition #{last.pk} set.",
                field="action",
                code="level_changed",
            )
        revert = _level_set_now(
            row, to_level=last.from_level, user=user, reason=reason, evidence={"revert_of": last.pk}, why="revert"
        )
    logger.warning("autonomy of %s reverted to %s by %s: %s", row.name, row.autonomy_level, user, reason)
    return revert
