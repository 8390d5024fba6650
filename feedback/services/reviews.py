"""Writes of proposals, executions, outcomes and manual overrides; each writes its feedback record in the same transaction."""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from rest_framework import status

from actions.models import Action, AutonomyLevel
from actions.services import action_name_validate, action_register
from common.api import ApplicationError, Conflict, NotFound
from common.text import label_normalize, visible_text
from common.validation import confidence_validate
from feedback.delta import delta_is_empty, json_clean, json_delta, json_equal
from feedback.models import PROPOSAL_TRANSITIONS, Execution, FeedbackRecord, FeedbackType, Proposal, ProposalStatus, ReviewOutcome

# --- Proposals, executions, outcomes, feedback records, mistake patterns ---
# Every change that causes feedback writes its FeedbackRecord inside the SAME
# transaction.atomic() block, so the admin, the API and commands (which all call
# these services) can never leave a change without its record or the reverse.


logger = logging.getLogger(__name__)

MAX_EXPLANATION = 5000
MAX_CATEGORY = 60


class Forbidden(ApplicationError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "forbidden"


@dataclass(frozen=True)
class Reviewer:
    """Who made a review: an admin user, an API key (review tool), or a command."""

    user: object | None = None
    key: object | None = None
    source: str = "api"  # api, admin, admin_bulk, command


def _json_object(value, *, field: str) -> dict:
    if not isinstance(value, dict):
        raise ApplicationError("Must be a JSON object.", field=field)
    return json_clean(value)


def _category(value: str) -> str:
    # "wrong_recipient" with a zero-width space, "Wrong_Recipient" and its fullwidth form are "wrong_recipient"
    value = label_normalize(value)
    if len(value) > MAX_CATEGORY:
        raise ApplicationError(f"At most {MAX_CATEGORY} characters.", field="mistake_category")
    return value


def _explanation(value: str, field: str = "review_notes") -> str:
    value = (value or "").strip()
    if not visible_text(value).strip():
        value = ""  # only zero-width or control characters: no explanation
    if len(value) > MAX_EXPLANATION:
        raise ApplicationError(f"At most {MAX_EXPLANATION} characters.", field=field)
    return value


def _feedback_create(*, reviewer: Reviewer, **fields) -> FeedbackRecord:
    return FeedbackRecord.objects.create(created_by=reviewer.user, created_by_key=reviewer.key, source=reviewer.source, **fields)


def _locked(model, pk, *, agent=None):
    qs = model.objects.select_for_update(of=("self",)).select_related("action", "agent")
    if agent is not None:
        qs = qs.filter(agent=agent)
    obj = qs.filter(pk=pk).first()
    if obj is None:
        raise NotFound(f"{model._meta.verbose_name.capitalize()} {pk} not found.", field="id")
    return obj


def _check_transition(proposal: Proposal, target: str) -> None:
    if target not in PROPOSAL_TRANSITIONS[ProposalStatus(proposal.status)]:
        raise Conflict(
            f"Proposal {proposal.pk} is {proposal.status}; it cannot become {target}.",
            field="status",
            code="invalid_transition",
            extra={"current_status": proposal.status},
        )


def _check_not_self_review(obj, reviewer: Reviewer) -> None:
    if reviewer.key is not None and reviewer.key.agent_id == obj.agent_id:
        raise Forbidden("An agent cannot review its own proposals or executions.", field="id")


def _pk(obj_or_pk) -> int:
    return obj_or_pk.pk if hasattr(obj_or_pk, "pk") else int(obj_or_pk)


def proposal_create(*, agent, action: str, proposed_action: dict, reasoning: dict) -> Proposal:
    """Record a proposal; an action not yet in the catalogue is registered at level 1 (propose only)."""

    proposed_action = _json_object(proposed_action, field="proposed_action")
    reasoning = _json_object(reasoning, field="reasoning")
    if "confidence" not in reasoning:
        raise ApplicationError(
            "reasoning.confidence is required: the agent's confidence in [0, 1].", field="reasoning.confidence"
        )
    confidence = confidence_validate(reasoning["confidence"], field="reasoning.confidence")
    with transaction.atomic():
        action_obj = action_register(name=action)
        proposal = Proposal.objects.create(
            agent=agent, action=action_obj, proposed_action=proposed_action, reasoning=reasoning, confidence=confidence
        )
    return proposal


def proposal_approve(*, proposal, reviewer: Reviewer, notes: str = "") -> Proposal:
    """pending → approved. Approval is not feedback about a mistake, so no record is written."""
    notes = _explanation(notes)
    with transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.APPROVED)
        obj.status = ProposalStatus.APPROVED
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = (
            notes,
            reviewer.user,
            reviewer.key,
            timezone.now(),
        )
        obj.save(update_fields=["status", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
    return obj


def proposal_reject(*, proposal, reviewer: Reviewer, notes: str = "", mistake_category: str = "") -> Proposal:
    """pending → rejected, with its ``rejection`` feedback record."""
    notes, category = _explanation(notes), _category(mistake_category)
    with transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.REJECTED)
        obj.status = ProposalStatus.REJECTED
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = (
            notes,
            reviewer.user,
            reviewer.key,
            timezone.now(),
        )
        obj.save(update_fields=["status", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        _feedback_create(
            reviewer=reviewer,
            agent_id=obj.agent_id,
            action_id=obj.action_id,
            proposal=obj,
            feedback_type=FeedbackType.REJECTION,
            original_action=obj.proposed_action,
            human_explanation=notes,
            agent_confidence=obj.confidence,
            action_context=obj.reasoning,
            mistake_category=category,
        )
    return obj


def proposal_modify(
    *, proposal, reviewer: Reviewer, modified_action: dict, notes: str = "", mistake_category: str = ""
) -> Proposal:
    """pending → modified, with a ``correction`` record carrying the computed delta."""
    modified_action = _json_object(modified_action, field="modified_action")
    notes, category = _explanation(notes), _category(mistake_category)
    with transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.MODIFIED)
        delta = json_delta(obj.proposed_action, modified_action)
        if delta_is_empty(delta):
            raise ApplicationError(
                "The modified action is the same as the proposed one; approve it instead.", field="modified_action"
            )
        obj.status, obj.modified_action = ProposalStatus.MODIFIED, modified_action
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = (
            notes,
            reviewer.user,
            reviewer.key,
            timezone.now(),
        )
        obj.save(update_fields=["status", "modified_action", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        _feedback_create(
            reviewer=reviewer,
            agent_id=obj.agent_id,
            action_id=obj.action_id,
            proposal=obj,
            feedback_type=FeedbackType.CORRECTION,
            original_action=obj.proposed_action,
            corrected_action=modified_action,
            correction_delta=delta,
            human_explanation=notes,
            agent_confidence=obj.confidence,
            action_context=obj.reasoning,
            mistake_category=category,
        )
    return obj


def proposal_outcome_record(
    *,
    agent,
    proposal_id: int,
    success: bool,
    result=None,
    error: str = "",
    explanation: str = "",
    mistake_category: str = "",
    reviewer: Reviewer | None = None,
) -> Proposal:
    """approved/modified → completed or failed; a failure writes an ``outcome_failure`` record (its explanation and
    mistake category are refused on a success, which records neither)."""
    if not isinstance(success, bool):
        raise ApplicationError("success must be true or false.", field="success")
    if success:
        for field, value in (("explanation", explanation), ("mistake_category", mistake_category)):
            if value and str(value).strip():
                raise ApplicationError(f"A success takes no {field.replace('_', ' ')}; only a failure records one.", field=field)
    error, explanation, category = (
        _explanation(error, "error"),
        _explanation(explanation, "explanation"),
        _category(mistake_category),
    )
    reviewer = reviewer or Reviewer(source="api")
    with transaction.atomic():
        obj = _locked(Proposal, proposal_id, agent=agent)
        target = ProposalStatus.COMPLETED if success else ProposalStatus.FAILED
        _check_transition(obj, target)
        result = json_clean(result)
        obj.status, obj.outcome_result, obj.outcome_error, obj.completed_at = target, result, error, timezone.now()
        obj.save(update_fields=["status", "outcome_result", "outcome_error", "completed_at"])
        if not success:
            _feedback_create(
                reviewer=reviewer,
                agent_id=obj.agent_id,
                action_id=obj.action_id,
                proposal=obj,
                feedback_type=FeedbackType.OUTCOME_FAILURE,
                original_action=obj.proposed_action if obj.modified_action is None else obj.modified_action,  # {} ran as modified
                human_explanation=explanation or error,
                agent_confidence=obj.confidence,
                action_context={"reasoning": obj.reasoning, "result": result, "error": error},
                mistake_category=category,
            )
    return obj


def execution_create(
    *,
    agent,
    action: str,
    params: dict,
    reasoning: dict,
    confidence=None,
    success: bool,
    result=None,
    error: str = "",
    duration_ms: int | None = None,
) -> Execution:
    """Record an action the agent ran alone; only actions at level 2 or 3 may run without a proposal."""

    name = action_name_validate(name=action)
    params = _json_object(params, field="params")
    reasoning = _json_object(reasoning, field="reasoning")
    if confidence is None:
        if "confidence" not in reasoning:
            raise ApplicationError("confidence (or reasoning.confidence) is required.", field="confidence")
        confidence = confidence_validate(reasoning["confidence"], field="reasoning.confidence")
    else:
        confidence = confidence_validate(confidence)
        if "confidence" in reasoning:  # both given: the stored reasoning must not say another confidence
            stated = confidence_validate(reasoning["confidence"], field="reasoning.confidence")
            if stated != confidence:
                raise ApplicationError(
                    f"reasoning.confidence ({stated}) differs from confidence ({confidence}); give one, or the same.",
                    field="reasoning.confidence",
                )
    if not isinstance(success, bool):
        raise ApplicationError("success must be true or false.", field="success")
    if duration_ms is not None and (isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0):
        raise ApplicationError("duration_ms must be a whole number >= 0.", field="duration_ms")
    action_obj = Action.objects.filter(name=name).first()
    level = action_obj.autonomy_level if action_obj else AutonomyLevel.PROPOSE
    if level < AutonomyLevel.ACT_REVIEWED:
        raise Conflict(
            f"Action {name} is at autonomy level {level} (propose only); submit a proposal instead.",
            field="action",
            code="not_autonomous",
            extra={"autonomy_level": int(level)},
        )
    with transaction.atomic():
        return Execution.objects.create(
            agent=agent,
            action=action_obj,
            params=params,
            reasoning=reasoning,
            confidence=confidence,
            success=success,
            result=json_clean(result),
            error=_explanation(error, "error"),
            duration_ms=duration_ms,
        )


def execution_review(
    *,
    execution,
    reviewer: Reviewer,
    outcome: str,
    notes: str = "",
    corrected_action: dict | None = None,
    mistake_category: str = "",
) -> Execution:
    """Review an execution once: ``correct`` (positive record) or ``incorrect`` (negative record, with the corrected
    action and the mistake category when given). A corrected action or a category on a ``correct`` review, or a
    corrected action equal to what ran, is refused (nothing would record it)."""
    if outcome not in ReviewOutcome.values:
        raise ApplicationError(f"outcome must be one of {', '.join(ReviewOutcome.values)}.", field="outcome")
    if outcome == ReviewOutcome.CORRECT:
        for field, value in (("corrected_action", corrected_action is not None), ("mistake_category", bool(mistake_category))):
            if value:
                raise ApplicationError(f"A correct execution takes no {field.replace('_', ' ')}.", field=field)
    if corrected_action is not None:
        corrected_action = _json_object(corrected_action, field="corrected_action")
    notes, category = _explanation(notes), _category(mistake_category)
    with transaction.atomic():
        obj = _locked(Execution, _pk(execution))
        _check_not_self_review(obj, reviewer)
        if corrected_action is not None and json_equal(corrected_action, obj.params):
            raise ApplicationError("The corrected action is what ran; send what it should have been.", field="corrected_action")
        if obj.review_outcome:
            raise Conflict(
                f"Execution {obj.pk} was already reviewed {obj.review_outcome}.",
                field="outcome",
                code="already_reviewed",
                extra={"current_status": obj.review_outcome},
            )
        obj.review_outcome, obj.review_notes = outcome, notes
        obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = reviewer.user, reviewer.key, timezone.now()
        obj.save(update_fields=["review_outcome", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        incorrect = outcome == ReviewOutcome.INCORRECT
        _feedback_create(
            reviewer=reviewer,
            agent_id=obj.agent_id,
            action_id=obj.action_id,
            execution=obj,
            feedback_type=FeedbackType.EXECUTION_INCORRECT if incorrect else FeedbackType.EXECUTION_CORRECT,
            original_action=obj.params,
            corrected_action=corrected_action if incorrect else None,
            correction_delta=json_delta(obj.params, corrected_action) if incorrect and corrected_action is not None else None,
            human_explanation=notes,
            agent_confidence=obj.confidence,
            action_context={"reasoning": obj.reasoning, "success": obj.success, "error": obj.error},
            mistake_category=category if incorrect else "",
        )
    return obj


def manual_override_record(
    *,
    agent,
    action: str,
    original_action: dict,
    corrected_action: dict,
    explanation: str = "",
    confidence=None,
    context: dict | None = None,
    proposal_id: int | None = None,
    execution_id: int | None = None,
    mistake_category: str = "",
    reviewer: Reviewer | None = None,
) -> FeedbackRecord:
    """A human overrode what the agent did or was about to do (``POST /api/v1/overrides``)."""

    name = action_name_validate(name=action)
    original_action = _json_object(original_action, field="original_action")
    corrected_action = _json_object(corrected_action, field="corrected_action")
    context = _json_object(context if context is not None else {}, field="context")
    if confidence is not None:
        confidence = confidence_validate(confidence)
    explanation, category = _explanation(explanation, "explanation"), _category(mistake_category)
    reviewer = reviewer or Reviewer(source="api")
    action_obj = Action.objects.filter(name=name).first()
    if action_obj is None:
        raise NotFound(f"Action {name} is not in the catalogue.", field="action")
    delta = json_delta(original_action, corrected_action)
    if delta_is_empty(delta):
        raise ApplicationError("The corrected action is the same as the original one.", field="corrected_action")
    with transaction.atomic():
        proposal = execution = None
        if proposal_id is not None:
            proposal = Proposal.objects.filter(pk=proposal_id, agent=agent, action=action_obj).first()
            if proposal is None:
                raise NotFound(f"Proposal {proposal_id} for {name} not found.", field="proposal")
        if execution_id is not None:
            execution = Execution.objects.filter(pk=execution_id, agent=agent, action=action_obj).first()
            if execution is None:
                raise NotFound(f"Execution {execution_id} for {name} not found.", field="execution")
        if confidence is None:
            confidence = (proposal or execution).confidence if (proposal or execution) else None
        return _feedback_create(
            reviewer=reviewer,
            agent=agent,
            action=action_obj,
            proposal=proposal,
            execution=execution,
            feedback_type=FeedbackType.MANUAL_OVERRIDE,
            original_action=original_action,
            corrected_action=corrected_action,
            correction_delta=delta,
            human_explanation=explanation,
            agent_confidence=confidence,
            action_context=context,
            mistake_category=category,
        )
