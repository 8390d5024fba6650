"""Reads for consult, calibration and autonomy."""

from django.conf import settings

from actions.models import Action, AutonomyLevel
from actions.selectors import action_get
from agents.models import Agent
from autonomy.calibration import clamp
from autonomy.models import AutonomyTransition, CalibrationRecord, TransitionStatus
from common.validation import confidence_validate
from feedback.selectors import active_patterns, active_rules


def latest_calibration(*, agent_id: int, action_id: int | None) -> CalibrationRecord | None:
    """The action's latest calibration for the agent when it counted samples, else the agent's latest overall one.

    A per-action run with no counted samples (a new or rarely used action) measured nothing: its
    adjustment is not evidence, so the agent-wide calibration applies instead."""
    qs = CalibrationRecord.objects.filter(agent_id=agent_id).order_by("-computed_at", "-id")
    if action_id:
        own = qs.filter(action_id=action_id).first()
        if own is not None and own.sample_count > 0:
            return own
    return qs.filter(action__isnull=True).first()


def transition_count(*, status: str | None = None) -> int:
    qs = AutonomyTransition.objects.all()
    return (qs.filter(status=status) if status else qs).count()


def transition_list(*, status: str | None = None, limit: int = 200, offset: int = 0) -> list[AutonomyTransition]:
    """Autonomy transitions, newest first, optionally in one status: ``limit`` of them after ``offset``."""
    qs = AutonomyTransition.objects.select_related("action", "decided_by", "decided_by_key__agent").order_by("-created_at", "-id")
    if status:
        qs = qs.filter(status=status)
    return list(qs[offset : offset + limit])


def action_consult(*, agent: Agent, action_name: str, confidence: float) -> dict:
    """What the agent should know before acting: adjusted confidence, warnings, active rules.

    An active mistake pattern for (agent, action) lowers confidence by
    ``CONSULT_PATTERN_PENALTY`` (not below ``CONSULT_PATTERN_FLOOR``, and never
    raising a confidence already below it); then the latest calibration
    adjustment is added (none from a record that counted no samples), the
    result kept within [0.1, 1.0] (the floor never raising a confidence already
    below it: a negative adjustment never raises the confidence, a positive one
    never lowers it). Approval is required at level 1, when a rule asks for
    review, or below ``CONSULT_APPROVAL_BELOW``.
    """
    confidence = confidence_validate(confidence)
    action = action_get(name=action_name)
    warnings: list[str] = []
    patterns = active_patterns(agent=agent, action=action)
    rules = active_rules(agent=agent, action=action)
    adjusted = confidence
    penalty = 0.0
    if patterns:
        floor = settings.CONSULT_PATTERN_FLOOR
        adjusted = max(min(confidence, floor), confidence - settings.CONSULT_PATTERN_PENALTY)
        penalty = round(adjusted - confidence, 6)
        for p in patterns:
            warnings.append(f"Repeated mistake ({p.occurrence_count}×, {p.category}): {p.description}")
    calibration = latest_calibration(agent_id=agent.pk, action_id=action.pk)
    # A record that counted no samples (the agent's samples left the window) measured nothing: no adjustment.
    measured = calibration is not None and calibration.sample_count > 0 and calibration.ece is not None
    adjustment = calibration.recommended_adjustment if measured else 0.0
    if adjustment:
        adjusted = clamp(adjusted + adjustment, min(0.1, adjusted), 1.0)
        warnings.append(f"Calibration adjusts your confidence by {adjustment:+.3f} (ECE {calibration.ece:.3f}).")
    for r in rules:
        warnings.append(f"Correction rule #{r.pk}: {r.precondition}")
    reasons = []
    if action.autonomy_level == AutonomyLevel.PROPOSE:
        reasons.append("the action is at level 1 (propose only)")
    if any(r.require_review for r in rules):
        reasons.append("a correction rule requires review")
    if adjusted < settings.CONSULT_APPROVAL_BELOW:
        reasons.append(f"adjusted confidence is below {settings.CONSULT_APPROVAL_BELOW}")
    return {
        "action": action.name,
        "autonomy_level": action.autonomy_level,
        "stated_confidence": confidence,
        "adjusted_confidence": round(adjusted, 6),
        "pattern_penalty": penalty,
        "calibration_adjustment": adjustment,
        "require_approval": bool(reasons),
        "approval_reasons": reasons,
        "warnings": warnings,
        "rules": [
            {
                "id": r.pk,
                "precondition": r.precondition,
                "correction": r.correction,
                "require_review": r.require_review,
                "expires_at": r.expires_at,
            }
            for r in rules
        ],
        "patterns": [
            {
                "id": p.pk,
                "category": p.category,
                "description": p.description,
                "occurrence_count": p.occurrence_count,
                "last_seen": p.last_seen,
            }
            for p in patterns
        ],
    }


def calibration_history(*, agent_id: int, action_id: int | None, limit: int = 50) -> list[CalibrationRecord]:
    """The agent's calibration records for one scope, oldest first (for the ECE trend)."""
    qs = CalibrationRecord.objects.filter(agent_id=agent_id, ece__isnull=False)
    qs = qs.filter(action_id=action_id) if action_id else qs.filter(action__isnull=True)
    return list(reversed(qs.order_by("-computed_at", "-id")[:limit]))


# --- The review inbox ---


def transitions_waiting():
    return AutonomyTransition.objects.filter(status=TransitionStatus.PROPOSED)


def transitions_by_ids(ids: list[int]):
    return AutonomyTransition.objects.filter(pk__in=ids).select_related("action", "decided_by")


def transitions_waiting_lock(*, ids: list[int]) -> None:
    """Lock the waiting transitions among ``ids`` in the caller's transaction, in the order every decision, emergency
    stop and revert takes: their actions first, then the transitions, each in key order (no lock cycle)."""
    waiting = transitions_waiting().filter(pk__in=ids)
    action_ids = sorted(set(waiting.values_list("action_id", flat=True)))
    list(Action.objects.filter(pk__in=action_ids).order_by("pk").select_for_update().values_list("pk"))
    list(waiting.order_by("pk").select_for_update().values_list("pk"))


def waiting_transition(*, action_id: int) -> AutonomyTransition | None:
    """The proposed change of the action's level awaiting a reviewer, if any."""
    return transitions_waiting().filter(action_id=action_id).order_by("id").first()


def last_applied_transition(*, action_id: int) -> AutonomyTransition | None:
    """The change that set the action's current level, if any (what a revert undoes)."""
    return (
        AutonomyTransition.objects.filter(action_id=action_id, status=TransitionStatus.APPLIED)
        .order_by("-decided_at", "-id")
        .first()
    )
