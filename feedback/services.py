"""Writes for the feedback app. Each service is one transaction."""

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------
# Flow: learning.api.ResolveApi -> disambiguation_record (every ambiguous answer);
# select/abandon endpoints -> disambiguation_select / disambiguation_abandon (status +
# learning signals, one transaction) -> feedback.tasks.disambiguation_signals_process_task
# (on commit; eager by default) -> disambiguation_signals_process: positive signals
# become learning candidates (>= accumulate) and are promoted at once (>= auto-promote,
# user scope only); every signal adds to PhraseEvidence, which the resolver reads to
# penalise verbs users turned down for similar phrases.

import logging
import uuid
from dataclasses import asdict

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.api import ApplicationError, Conflict, NotFound
from feedback.models import AbandonEvent, DisambiguationRequest, LearningSignal, PhraseEvidence
from feedback.variants import phrase_variants
from learning.text import normalize_phrase, text_hash

logger = logging.getLogger(__name__)


def disambiguation_record(*, resolution, agent=None, domain: str | None = None, channel: str = "api") -> DisambiguationRequest | None:
    """Store an ``ambiguous`` resolution with the options shown (None for other outcomes).

    The commit does not wait for the write-ahead log to reach disk (``synchronous_commit = off`` for
    this transaction only): it sits on the resolve path, and a database crash can at worst lose the
    last fraction of a second of open requests, whose select or abandon then answers 404; it never
    corrupts anything. Every other write keeps the server's setting."""
    if resolution.outcome != "ambiguous":
        return None
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET LOCAL synchronous_commit TO OFF")
        return DisambiguationRequest.objects.create(
            request_id=uuid.UUID(resolution.request_id),
            agent=agent,
            channel=channel,
            user_id=resolution.user_id,
            text=resolution.text[:2000],
            normalized=normalize_phrase(resolution.text)[:2000],
            domain=domain or "",
            options=[asdict(o) for o in resolution.options],
        )


def _locked_request(request_id, *, agent_id: int | None, user_id: str | None, channel: str) -> DisambiguationRequest:
    """The caller's own request, locked; 404 for unknown, malformed or someone else's ids."""
    try:
        key = uuid.UUID(str(request_id))
    except ValueError:
        raise NotFound("No such disambiguation request.", field="request_id") from None
    row = DisambiguationRequest.objects.select_for_update().filter(request_id=key).first()
    foreign = row is None or (
        (row.agent_id != agent_id if channel == DisambiguationRequest.Channel.API else row.channel != channel)
        or (user_id is not None and row.user_id != user_id)
        or (channel == DisambiguationRequest.Channel.CONSOLE and row.user_id != user_id)
    )
    if foreign:
        raise NotFound("No such disambiguation request.", field="request_id")
    return row


def _answered(row: DisambiguationRequest) -> Conflict:
    if row.status == DisambiguationRequest.Status.SELECTED:
        message = f"This request was answered already: {row.selected_verb} was selected."
    else:
        message = f"This request is {row.status} already."
    return Conflict(
        message, field="request_id", code="already_answered",
        extra={"status": row.status, "selected_verb": row.selected_verb or None},
    )


def _signals_enqueue(request_pk: int) -> None:
    from feedback.tasks import disambiguation_signals_process_task

    transaction.on_commit(lambda: disambiguation_signals_process_task.delay(request_pk), robust=True)


def disambiguation_select(
    *, request_id, selected_verb: str, args: dict | None = None, agent_id: int | None = None,
    user_id: str | None = None, channel: str = "api",
) -> DisambiguationRequest:
    """Record the user's pick among the options: a gold label, its variants, and a rejection of the rest."""
    c = settings.FEEDBACK_SIGNAL_CONFIDENCE
    with transaction.atomic():
        row = _locked_request(request_id, agent_id=agent_id, user_id=user_id, channel=channel)
        if row.status != DisambiguationRequest.Status.OPEN:
            raise _answered(row)
        offered = row.option_verbs
        if selected_verb not in offered:
            raise ApplicationError(
                f"{selected_verb!r} was not one of the options offered: {', '.join(offered)}.", field="selected_verb",
                code="not_offered",
            )
        rejected = [v for v in offered if v != selected_verb]
        row.status = DisambiguationRequest.Status.SELECTED
        row.selected_verb = selected_verb
        row.selected_args = args or {}
        row.answered_at = timezone.now()
        row.save(update_fields=["status", "selected_verb", "selected_args", "answered_at"])

        def signal(phrase, verb, outcome, source, confidence, negative=False, alternatives=()):
            return LearningSignal(
                request=row, user_id=row.user_id, phrase=phrase, normalized=normalize_phrase(phrase), verb=verb,
                outcome=outcome, source=source, confidence=confidence, is_negative=negative,
                rejected_alternatives=list(alternatives),
            )

        O, S = LearningSignal.Outcome, LearningSignal.Source
        signals = [signal(row.text, selected_verb, O.SELECTED_ALT, S.USER_DISAMBIGUATION, c["selected"], alternatives=rejected)]
        signals += [
            signal(v, selected_verb, O.GENERATED_VARIANT, S.GENERATED_VARIANT, c["variant"], alternatives=rejected)
            for v in phrase_variants(row.normalized, limit=settings.FEEDBACK_MAX_VARIANTS)
        ]
        signals += [signal(row.text, v, O.REJECTED_ALT, S.USER_DISAMBIGUATION, c["rejected"], negative=True) for v in rejected]
        LearningSignal.objects.bulk_create(signals, ignore_conflicts=True)
        _signals_enqueue(row.pk)
    logger.info("disambiguation %s: %s selected (%d signals)", row.request_id, selected_verb, len(signals))
    return row


def disambiguation_abandon(
    *, request_id, reason: str, agent_id: int | None = None, user_id: str | None = None, channel: str = "api"
) -> DisambiguationRequest:
    """Record that the user walked away from the options: a weak negative signal for each of them."""
    if reason not in AbandonEvent.Reason.values:
        raise ApplicationError(f"Unknown reason {reason!r}; use one of {', '.join(AbandonEvent.Reason.values)}.", field="reason")
    with transaction.atomic():
        row = _locked_request(request_id, agent_id=agent_id, user_id=user_id, channel=channel)
        if row.status != DisambiguationRequest.Status.OPEN:
            raise _answered(row)
        row.status = DisambiguationRequest.Status.ABANDONED
        row.answered_at = timezone.now()
        row.save(update_fields=["status", "answered_at"])
        AbandonEvent.objects.create(request=row, reason=reason)
        LearningSignal.objects.bulk_create(
            [
                LearningSignal(
                    request=row, user_id=row.user_id, phrase=row.text, normalized=row.normalized, verb=verb,
                    outcome=LearningSignal.Outcome.ABANDONED, source=LearningSignal.Source.USER_ABANDONMENT,
                    confidence=settings.FEEDBACK_SIGNAL_CONFIDENCE["abandoned"], is_negative=True,
                )
                for verb in row.option_verbs
            ],
            ignore_conflicts=True,
        )
        _signals_enqueue(row.pk)
    logger.info("disambiguation %s abandoned (%s)", row.request_id, reason)
    return row


def disambiguations_expire(*, older_than_s: float | None = None) -> int:
    """Mark open requests older than the expiry setting ``expired``; answers how many."""
    age = settings.FEEDBACK_DISAMBIGUATION_EXPIRY_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timezone.timedelta(seconds=age)
    with transaction.atomic():
        count = DisambiguationRequest.objects.filter(status=DisambiguationRequest.Status.OPEN, created_at__lt=cutoff).update(
            status=DisambiguationRequest.Status.EXPIRED, answered_at=timezone.now()
        )
    if count:
        logger.info("expired %d open disambiguation requests", count)
    return count


def _vector_literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def phrase_evidence_add(*, user_id: str | None, phrase: str, verb: str, negative: float = 0.0, positive: float = 0.0,
                        vector=None, model: str = "") -> None:
    """Add to one (phrase, verb, user) evidence row atomically."""
    phrase_evidence_add_many(
        rows=[{"user_id": user_id, "phrase": phrase, "verb": verb, "negative": negative, "positive": positive, "vector": vector}],
        model=model,
    )


def phrase_evidence_add_many(*, rows: list[dict], model: str) -> int:
    """Add evidence rows ({user_id, phrase, verb, negative, positive, vector}) in one INSERT ... ON CONFLICT DO UPDATE.

    Rows for the same (phrase, verb, user) are summed first; answers how many distinct rows were written.
    """
    merged: dict[tuple, dict] = {}
    for r in rows:
        normalized = normalize_phrase(r["phrase"])[:2000]
        key = (r["user_id"], normalized, r["verb"])
        m = merged.setdefault(key, {**r, "normalized": normalized, "negative": 0.0, "positive": 0.0, "count": 0})
        m["negative"] += r.get("negative", 0.0)
        m["positive"] += r.get("positive", 0.0)
        m["count"] += 1
        if m.get("vector") is None and r.get("vector") is not None:
            m["vector"] = r["vector"]
    if not merged:
        return 0
    table = PhraseEvidence._meta.db_table
    values, params = [], []
    for (user_id, normalized, verb), m in merged.items():
        vector = m.get("vector")
        values.append("(%s, %s, %s, %s, %s, %s, %s, %s::vector, %s, %s, now(), now())")
        params += [
            user_id, m["phrase"][:2000], normalized, verb, round(m["negative"], 6), round(m["positive"], 6), m["count"],
            _vector_literal(vector) if vector is not None else None,
            model if vector is not None else "", text_hash(normalized) if vector is not None else "",
        ]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {table} (user_id, phrase, normalized, verb, negative, positive, signal_count,
                                 embedding, embedding_model, embedding_hash, created_at, updated_at)
            VALUES {", ".join(values)}
            ON CONFLICT ON CONSTRAINT phraseevidence_unique_per_scope DO UPDATE SET
                negative = {table}.negative + EXCLUDED.negative,
                positive = {table}.positive + EXCLUDED.positive,
                signal_count = {table}.signal_count + EXCLUDED.signal_count,
                embedding = COALESCE(EXCLUDED.embedding, {table}.embedding),
                embedding_model = CASE WHEN EXCLUDED.embedding IS NULL THEN {table}.embedding_model ELSE EXCLUDED.embedding_model END,
                embedding_hash = CASE WHEN EXCLUDED.embedding IS NULL THEN {table}.embedding_hash ELSE EXCLUDED.embedding_hash END,
                updated_at = now()
            """,
            params,
        )
    return len(merged)


def disambiguation_signals_process(*, request_pk: int) -> dict:
    """Learn from one request's signals, once (idempotent per request; safe to run twice or concurrently)."""
    from learning.models import LearningCandidate
    from learning.services import candidate_approve, candidate_record, embeddings_compute

    pending = list(LearningSignal.objects.filter(request_id=request_pk, processed_at__isnull=True).order_by("id"))
    counts = {"promoted": 0, "accumulated": 0, "evidence": 0, "ignored": 0, "already_processed": False}
    # Vectors first, outside the transaction (the embedder's cache serves the nested services too).
    evidence_texts = sorted({s.normalized for s in pending})
    vectors, model = embeddings_compute(evidence_texts)
    vector_of = dict(zip(evidence_texts, vectors)) if vectors else {}
    auto, accumulate = settings.FEEDBACK_AUTO_PROMOTE_CONFIDENCE, settings.FEEDBACK_ACCUMULATE_CONFIDENCE

    with transaction.atomic():
        row = DisambiguationRequest.objects.select_for_update().filter(pk=request_pk).first()
        if row is None or row.processed_at is not None:
            counts["already_processed"] = row is not None
            return counts
        now = timezone.now()
        rejected_confidence = settings.FEEDBACK_SIGNAL_CONFIDENCE["rejected"]
        evidence = []
        for s in pending:
            vector = vector_of.get(s.normalized)
            evidence.append({
                "user_id": s.user_id, "phrase": s.phrase, "verb": s.verb, "vector": vector,
                "negative": s.confidence if s.is_negative else 0.0, "positive": 0.0 if s.is_negative else s.confidence,
            })
            if s.outcome == LearningSignal.Outcome.GENERATED_VARIANT:
                # A paraphrase of a phrase whose alternatives the user turned down: the
                # rejection carries over, discounted by the variant's own confidence.
                evidence.extend(
                    {"user_id": s.user_id, "phrase": s.phrase, "verb": alternative, "vector": vector,
                     "negative": round(s.confidence * rejected_confidence, 4), "positive": 0.0}
                    for alternative in s.rejected_alternatives
                )
        phrase_evidence_add_many(rows=evidence, model=model)
        for s in pending:
            if s.is_negative:
                s.result = LearningSignal.Result.EVIDENCE
            elif s.confidence < accumulate:
                s.result = LearningSignal.Result.IGNORED
            else:
                # Gold labels count toward a global candidate a reviewer decides on.
                if s.outcome == LearningSignal.Outcome.SELECTED_ALT and s.user_id:
                    candidate_record(
                        input_pattern=s.phrase, suggested_output=s.verb, user_id=None, source=s.source,
                        confidence=s.confidence, rejected_alternatives=s.rejected_alternatives,
                    )
                candidate = candidate_record(
                    input_pattern=s.phrase, suggested_output=s.verb, user_id=s.user_id, source=s.source,
                    confidence=s.confidence, rejected_alternatives=s.rejected_alternatives,
                )
                s.candidate_id = candidate.pk
                # Only a user's own scope is changed without review.
                if s.user_id and candidate.confidence >= auto and candidate.status == LearningCandidate.Status.PENDING:
                    candidate_approve(candidate=candidate)
                    s.result = LearningSignal.Result.PROMOTED
                else:
                    s.result = LearningSignal.Result.ACCUMULATED
            s.processed_at = now
            counts[s.result] += 1
        LearningSignal.objects.bulk_update(pending, ["result", "candidate_id", "processed_at"])
        row.processed_at = now
        row.save(update_fields=["processed_at"])
    logger.info("disambiguation %s learned from: %s", row.request_id, counts)
    return counts


# --- out: proposals, executions, outcomes, feedback records, mistake patterns (issues 6-7) ---
# Every change that causes feedback writes its FeedbackRecord inside the SAME
# transaction.atomic() block, so the admin, the API and commands (which all call
# these services) can never leave a change without its record or the reverse.

import logging as _out_logging  # noqa: E402
import math as _out_math  # noqa: E402
from dataclasses import dataclass as _out_dataclass  # noqa: E402
from dataclasses import field as _out_field  # noqa: E402
from datetime import timedelta as _out_timedelta  # noqa: E402

from django.conf import settings as _out_settings  # noqa: E402
from django.db import connection as _out_connection  # noqa: E402
from django.db import transaction as _out_transaction  # noqa: E402
from django.utils import timezone as _out_timezone  # noqa: E402
from rest_framework import status as _out_status  # noqa: E402

from config.api import ApplicationError, Conflict, NotFound  # noqa: E402
from feedback.delta import delta_is_empty, json_clean, json_delta  # noqa: E402
from feedback.models import (  # noqa: E402
    NEGATIVE_FEEDBACK_TYPES,
    PROPOSAL_TRANSITIONS,
    Execution,
    FeedbackRecord,
    FeedbackType,
    MistakePattern,
    PatternStatus,
    Proposal,
    ProposalStatus,
    ReviewOutcome,
)

_out_logger = _out_logging.getLogger("feedback.outcomes")

MAX_EXPLANATION = 5000
MAX_CATEGORY = 60


class Forbidden(ApplicationError):
    status_code = _out_status.HTTP_403_FORBIDDEN
    code = "forbidden"


@_out_dataclass(frozen=True)
class Reviewer:
    """Who made a review: an admin user, an API key (review tool), or a command."""

    user: object | None = None
    key: object | None = None
    source: str = "api"  # api, admin, admin_bulk, command


def confidence_validate(value, *, field: str = "confidence") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _out_math.isfinite(value):
        raise ApplicationError("Confidence must be a number in [0, 1].", field=field)
    if not 0.0 <= float(value) <= 1.0:
        raise ApplicationError(f"Confidence must be in [0, 1], not {value}.", field=field)
    return float(value)


def _json_object(value, *, field: str) -> dict:
    if not isinstance(value, dict):
        raise ApplicationError("Must be a JSON object.", field=field)
    return json_clean(value)


def _category(value: str) -> str:
    value = (value or "").strip()
    if len(value) > MAX_CATEGORY:
        raise ApplicationError(f"At most {MAX_CATEGORY} characters.", field="mistake_category")
    return value


def _explanation(value: str, field: str = "review_notes") -> str:
    value = (value or "").strip()
    if len(value) > MAX_EXPLANATION:
        raise ApplicationError(f"At most {MAX_EXPLANATION} characters.", field=field)
    return value


def _feedback_create(*, reviewer: Reviewer, **fields) -> FeedbackRecord:
    return FeedbackRecord.objects.create(
        created_by=reviewer.user, created_by_key=reviewer.key, source=reviewer.source, **fields
    )


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
    from autonomy.services import action_register

    proposed_action = _json_object(proposed_action, field="proposed_action")
    reasoning = _json_object(reasoning, field="reasoning")
    if "confidence" not in reasoning:
        raise ApplicationError("reasoning.confidence is required: the agent's confidence in [0, 1].", field="reasoning.confidence")
    confidence = confidence_validate(reasoning["confidence"], field="reasoning.confidence")
    with _out_transaction.atomic():
        action_obj = action_register(name=action)
        proposal = Proposal.objects.create(
            agent=agent, action=action_obj, proposed_action=proposed_action, reasoning=reasoning, confidence=confidence
        )
    return proposal


def proposal_approve(*, proposal, reviewer: Reviewer, notes: str = "") -> Proposal:
    """pending → approved. Approval is not feedback about a mistake, so no record is written."""
    notes = _explanation(notes)
    with _out_transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.APPROVED)
        obj.status = ProposalStatus.APPROVED
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = notes, reviewer.user, reviewer.key, _out_timezone.now()
        obj.save(update_fields=["status", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
    return obj


def proposal_reject(*, proposal, reviewer: Reviewer, notes: str = "", mistake_category: str = "") -> Proposal:
    """pending → rejected, with its ``rejection`` feedback record."""
    notes, category = _explanation(notes), _category(mistake_category)
    with _out_transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.REJECTED)
        obj.status = ProposalStatus.REJECTED
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = notes, reviewer.user, reviewer.key, _out_timezone.now()
        obj.save(update_fields=["status", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        _feedback_create(
            reviewer=reviewer, agent_id=obj.agent_id, action_id=obj.action_id, proposal=obj,
            feedback_type=FeedbackType.REJECTION, original_action=obj.proposed_action, human_explanation=notes,
            agent_confidence=obj.confidence, action_context=obj.reasoning, mistake_category=category,
        )
    return obj


def proposal_modify(*, proposal, reviewer: Reviewer, modified_action: dict, notes: str = "", mistake_category: str = "") -> Proposal:
    """pending → modified, with a ``correction`` record carrying the computed delta."""
    modified_action = _json_object(modified_action, field="modified_action")
    notes, category = _explanation(notes), _category(mistake_category)
    with _out_transaction.atomic():
        obj = _locked(Proposal, _pk(proposal))
        _check_not_self_review(obj, reviewer)
        _check_transition(obj, ProposalStatus.MODIFIED)
        delta = json_delta(obj.proposed_action, modified_action)
        if delta_is_empty(delta):
            raise ApplicationError("The modified action is the same as the proposed one; approve it instead.", field="modified_action")
        obj.status, obj.modified_action = ProposalStatus.MODIFIED, modified_action
        obj.review_notes, obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = notes, reviewer.user, reviewer.key, _out_timezone.now()
        obj.save(update_fields=["status", "modified_action", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        _feedback_create(
            reviewer=reviewer, agent_id=obj.agent_id, action_id=obj.action_id, proposal=obj,
            feedback_type=FeedbackType.CORRECTION, original_action=obj.proposed_action, corrected_action=modified_action,
            correction_delta=delta, human_explanation=notes, agent_confidence=obj.confidence,
            action_context=obj.reasoning, mistake_category=category,
        )
    return obj


def proposal_outcome_record(
    *, agent, proposal_id: int, success: bool, result=None, error: str = "", explanation: str = "",
    mistake_category: str = "", reviewer: Reviewer | None = None,
) -> Proposal:
    """approved/modified → completed or failed; a failure writes an ``outcome_failure`` record."""
    if not isinstance(success, bool):
        raise ApplicationError("success must be true or false.", field="success")
    error, explanation, category = _explanation(error, "error"), _explanation(explanation, "explanation"), _category(mistake_category)
    reviewer = reviewer or Reviewer(source="api")
    with _out_transaction.atomic():
        obj = _locked(Proposal, proposal_id, agent=agent)
        target = ProposalStatus.COMPLETED if success else ProposalStatus.FAILED
        _check_transition(obj, target)
        result = json_clean(result)
        obj.status, obj.outcome_result, obj.outcome_error, obj.completed_at = target, result, error, _out_timezone.now()
        obj.save(update_fields=["status", "outcome_result", "outcome_error", "completed_at"])
        if not success:
            _feedback_create(
                reviewer=reviewer, agent_id=obj.agent_id, action_id=obj.action_id, proposal=obj,
                feedback_type=FeedbackType.OUTCOME_FAILURE, original_action=obj.modified_action or obj.proposed_action,
                human_explanation=explanation or error, agent_confidence=obj.confidence,
                action_context={"reasoning": obj.reasoning, "result": result, "error": error}, mistake_category=category,
            )
    return obj


def execution_create(
    *, agent, action: str, params: dict, reasoning: dict, confidence=None, success: bool, result=None,
    error: str = "", duration_ms: int | None = None,
) -> Execution:
    """Record an action the agent ran alone; only actions at level 2 or 3 may run without a proposal."""
    from autonomy.models import Action, AutonomyLevel
    from autonomy.services import action_name_validate

    name = action_name_validate(action)
    params = _json_object(params, field="params")
    reasoning = _json_object(reasoning, field="reasoning")
    if confidence is None:
        if "confidence" not in reasoning:
            raise ApplicationError("confidence (or reasoning.confidence) is required.", field="confidence")
        confidence = confidence_validate(reasoning["confidence"], field="reasoning.confidence")
    else:
        confidence = confidence_validate(confidence)
    if not isinstance(success, bool):
        raise ApplicationError("success must be true or false.", field="success")
    if duration_ms is not None and (isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0):
        raise ApplicationError("duration_ms must be a whole number >= 0.", field="duration_ms")
    action_obj = Action.objects.filter(name=name).first()
    level = action_obj.autonomy_level if action_obj else AutonomyLevel.PROPOSE
    if level < AutonomyLevel.ACT_REVIEWED:
        raise Conflict(
            f"Action {name} is at autonomy level {level} (propose only); submit a proposal instead.",
            field="action", code="not_autonomous", extra={"autonomy_level": int(level)},
        )
    with _out_transaction.atomic():
        return Execution.objects.create(
            agent=agent, action=action_obj, params=params, reasoning=reasoning, confidence=confidence,
            success=success, result=json_clean(result), error=_explanation(error, "error"), duration_ms=duration_ms,
        )


def execution_review(
    *, execution, reviewer: Reviewer, outcome: str, notes: str = "", corrected_action: dict | None = None,
    mistake_category: str = "",
) -> Execution:
    """Review an execution once: ``correct`` (positive record) or ``incorrect`` (negative record)."""
    if outcome not in ReviewOutcome.values:
        raise ApplicationError(f"outcome must be one of {', '.join(ReviewOutcome.values)}.", field="outcome")
    if corrected_action is not None:
        corrected_action = _json_object(corrected_action, field="corrected_action")
    notes, category = _explanation(notes), _category(mistake_category)
    with _out_transaction.atomic():
        obj = _locked(Execution, _pk(execution))
        _check_not_self_review(obj, reviewer)
        if obj.review_outcome:
            raise Conflict(
                f"Execution {obj.pk} was already reviewed {obj.review_outcome}.", field="outcome",
                code="already_reviewed", extra={"current_status": obj.review_outcome},
            )
        obj.review_outcome, obj.review_notes = outcome, notes
        obj.reviewed_by, obj.reviewed_by_key, obj.reviewed_at = reviewer.user, reviewer.key, _out_timezone.now()
        obj.save(update_fields=["review_outcome", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"])
        incorrect = outcome == ReviewOutcome.INCORRECT
        _feedback_create(
            reviewer=reviewer, agent_id=obj.agent_id, action_id=obj.action_id, execution=obj,
            feedback_type=FeedbackType.EXECUTION_INCORRECT if incorrect else FeedbackType.EXECUTION_CORRECT,
            original_action=obj.params, corrected_action=corrected_action if incorrect else None,
            correction_delta=json_delta(obj.params, corrected_action) if incorrect and corrected_action is not None else None,
            human_explanation=notes, agent_confidence=obj.confidence,
            action_context={"reasoning": obj.reasoning, "success": obj.success, "error": obj.error},
            mistake_category=category if incorrect else "",
        )
    return obj


def manual_override_record(
    *, agent, action: str, original_action: dict, corrected_action: dict, explanation: str = "",
    confidence=None, context: dict | None = None, proposal_id: int | None = None, execution_id: int | None = None,
    mistake_category: str = "", reviewer: Reviewer | None = None,
) -> FeedbackRecord:
    """A human overrode what the agent did or was about to do (``POST /api/v1/corrections``)."""
    from autonomy.models import Action
    from autonomy.services import action_name_validate

    name = action_name_validate(action)
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
    with _out_transaction.atomic():
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
            reviewer=reviewer, agent=agent, action=action_obj, proposal=proposal, execution=execution,
            feedback_type=FeedbackType.MANUAL_OVERRIDE, original_action=original_action,
            corrected_action=corrected_action, correction_delta=delta, human_explanation=explanation,
            agent_confidence=confidence, action_context=context, mistake_category=category,
        )


# Advisory lock keys (two int4 keys: namespace, agent id or 0).
LOCK_NAMESPACE_DETECT = 61001


@_out_dataclass
class DetectionResult:
    created: list[int] = _out_field(default_factory=list)
    updated: list[int] = _out_field(default_factory=list)
    reopened: list[int] = _out_field(default_factory=list)
    linked_records: int = 0

    @property
    def pattern_ids(self) -> list[int]:
        return self.created + self.updated


_DETECT_SQL = """
WITH grp AS (
    SELECT fr.agent_id, fr.action_id,
           COALESCE(NULLIF(fr.mistake_category, ''), fr.feedback_type) AS category,
           count(*) AS n, min(fr.created_at) AS first_seen, max(fr.created_at) AS last_seen,
           mode() WITHIN GROUP (ORDER BY fr.human_explanation) FILTER (WHERE fr.human_explanation <> '') AS explanation,
           mode() WITHIN GROUP (ORDER BY fr.corrected_action::text) FILTER (WHERE fr.corrected_action IS NOT NULL) AS correction
      FROM feedback_feedbackrecord fr
     WHERE fr.feedback_type = ANY(%(types)s) AND fr.created_at >= %(since)s {agent_filter}
     GROUP BY 1, 2, 3
    HAVING count(*) >= %(min)s
)
INSERT INTO feedback_mistakepattern AS p
       (agent_id, action_id, category, description, common_explanation, common_correction, occurrence_count,
        first_seen, last_seen, status, resolution_notes, created_at, updated_at)
SELECT g.agent_id, g.action_id, g.category,
       format('%%s × %%s on %%s in %%s days%%s', g.n, g.category, a.name, %(window)s,
              CASE WHEN g.explanation IS NULL THEN '' ELSE format('; most common explanation: "%%s"', g.explanation) END),
       COALESCE(g.explanation, ''), g.correction::jsonb, g.n, g.first_seen, g.last_seen, 'active', '', now(), now()
  FROM grp g JOIN autonomy_action a ON a.id = g.action_id
 ORDER BY g.agent_id, g.action_id, g.category
ON CONFLICT (agent_id, action_id, category) DO UPDATE
   SET description = EXCLUDED.description,
       common_explanation = EXCLUDED.common_explanation,
       common_correction = EXCLUDED.common_correction,
       occurrence_count = EXCLUDED.occurrence_count,
       first_seen = LEAST(p.first_seen, EXCLUDED.first_seen),
       last_seen = GREATEST(p.last_seen, EXCLUDED.last_seen),
       status = CASE WHEN p.status = 'resolved' AND EXCLUDED.last_seen > p.resolved_at THEN 'active' ELSE p.status END,
       updated_at = now()
 WHERE (p.occurrence_count, p.last_seen, p.description, p.status)
       IS DISTINCT FROM (EXCLUDED.occurrence_count, GREATEST(p.last_seen, EXCLUDED.last_seen), EXCLUDED.description,
                         CASE WHEN p.status = 'resolved' AND EXCLUDED.last_seen > p.resolved_at THEN 'active' ELSE p.status END)
RETURNING p.id, (xmax = 0) AS inserted, p.status
"""

_LINK_SQL = """
UPDATE feedback_feedbackrecord fr
   SET pattern_id = p.id, processed = true, processed_at = now()
  FROM feedback_mistakepattern p
 WHERE p.agent_id = fr.agent_id AND p.action_id = fr.action_id
   AND p.category = COALESCE(NULLIF(fr.mistake_category, ''), fr.feedback_type)
   AND fr.feedback_type = ANY(%(types)s) AND fr.created_at >= %(since)s
   AND fr.pattern_id IS NULL {agent_filter}
"""


def mistake_patterns_detect(*, agent_id: int | None = None, window_days: int | None = None, min_count: int | None = None) -> DetectionResult:
    """Group negative feedback by (agent, action, category) in the database; 3+ make or update a pattern.

    One INSERT … ON CONFLICT DO UPDATE aggregates with GROUP BY (no Python loop over
    records) and one UPDATE links every contributing record not linked yet (a record's
    agent, action and category never change, so a linked record stays linked right). The unique constraint
    makes a pattern impossible to duplicate; an advisory lock serialises runs that
    overlap (a run for all agents takes it exclusively, runs for one agent share it
    and take their agent's key), so two runs at once wait instead of deadlocking.
    """
    window_days = _out_settings.MISTAKE_WINDOW_DAYS if window_days is None else window_days
    min_count = _out_settings.MISTAKE_MIN_COUNT if min_count is None else min_count
    if not isinstance(window_days, int) or window_days <= 0:
        raise ApplicationError("The window must be a positive number of days.", field="window_days")
    if not isinstance(min_count, int) or min_count < 1:
        raise ApplicationError("The minimum must be at least 1.", field="min")
    params = {
        "types": list(NEGATIVE_FEEDBACK_TYPES),
        "since": _out_timezone.now() - _out_timedelta(days=window_days),
        "min": min_count,
        "window": window_days,
        "agent": agent_id,
    }
    agent_filter = "AND fr.agent_id = %(agent)s" if agent_id is not None else ""
    result = DetectionResult()
    with _out_transaction.atomic(), _out_connection.cursor() as cur:
        if agent_id is None:
            cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", [LOCK_NAMESPACE_DETECT])
        else:
            cur.execute("SELECT pg_advisory_xact_lock_shared(%s, 0)", [LOCK_NAMESPACE_DETECT])
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE_DETECT, agent_id])
        cur.execute(_DETECT_SQL.format(agent_filter=agent_filter), params)
        for pk, inserted, _status in cur.fetchall():
            (result.created if inserted else result.updated).append(pk)
        cur.execute(_LINK_SQL.format(agent_filter=agent_filter), params)
        result.linked_records = cur.rowcount
    _out_logger.info(
        "mistake detection (agent=%s, %s days, min %s): %s new, %s updated patterns, %s records linked",
        agent_id, window_days, min_count, len(result.created), len(result.updated), result.linked_records,
    )
    return result


def mistake_pattern_set_status(*, pattern, status: str, notes: str = "", user=None) -> MistakePattern:
    """Reviewers dismiss, resolve or reactivate a pattern, with notes."""
    if status not in PatternStatus.values:
        raise ApplicationError(f"status must be one of {', '.join(PatternStatus.values)}.", field="status")
    notes = _explanation(notes, "notes")
    with _out_transaction.atomic():
        obj = MistakePattern.objects.select_for_update().filter(pk=_pk(pattern)).first()
        if obj is None:
            raise NotFound(f"Mistake pattern {_pk(pattern)} not found.", field="id")
        obj.status, obj.resolution_notes = status, notes
        if status in (PatternStatus.RESOLVED, PatternStatus.DISMISSED):
            obj.resolved_by, obj.resolved_at = user, _out_timezone.now()
        obj.save(update_fields=["status", "resolution_notes", "resolved_by", "resolved_at", "updated_at"])
    return obj


# --- Disambiguation feedback loop (issue 4, dis): fitting resolve threshold and margin ----


def resolution_profile_fit(*, held_out_share: float | None = None, max_wrong_pct: float | None = None,
                           limit: int | None = None) -> "FittedResolutionProfile":
    """Fit threshold and margin on gold labels (clicks, corrections) and store them as a *proposed* profile.

    Scores are recomputed leave-one-out (the text's own learned rows left out, else every
    example would be an exact match); a hashed share is held out and both the profile in
    force and the fitted one are measured on it, for the reviewer who activates it.
    """
    from feedback import fitting
    from feedback import selectors as feedback_selectors
    from feedback.models import FittedResolutionProfile
    from learning.resolution import profile
    from learning.services import embeddings_compute

    held_out_share = settings.FEEDBACK_FIT_HELD_OUT_SHARE if held_out_share is None else held_out_share
    max_wrong_pct = settings.FEEDBACK_FIT_MAX_WRONG_PCT if max_wrong_pct is None else max_wrong_pct
    if not 0.0 < held_out_share < 1.0:
        raise ApplicationError("The held-out share must be between 0 and 1.", field="held_out_share")
    gold = feedback_selectors.gold_labels(limit=limit or settings.FEEDBACK_FIT_MAX_EXAMPLES)
    if len(gold) < settings.FEEDBACK_FIT_MIN_EXAMPLES:
        raise ApplicationError(
            f"{len(gold)} gold labels; at least {settings.FEEDBACK_FIT_MIN_EXAMPLES} are needed to fit.", field="gold_labels",
            code="too_few_labels",
        )
    vectors, model = embeddings_compute([n for n, _, _ in gold])
    if vectors is None:
        raise ApplicationError("The embedder is unavailable; try again later.", field="embedder", code="embedder_unavailable")
    p = profile(model)  # the profile in force (an active fitted profile included): the baseline
    scores = []
    for (normalized, user_id, verb), vector in zip(gold, vectors):
        ranked = feedback_selectors.leave_one_out_scores(normalized=normalized, user_id=user_id, vector=vector, model=model, p=p)
        if not ranked:
            continue
        second = ranked[1][1] if len(ranked) > 1 else 0.0
        scores.append(fitting.GoldScore(f"{user_id}|{normalized}", ranked[0][1], second, ranked[0][0] == verb))
    train, held_out = fitting.split(scores, held_out_share)
    if not train or not held_out:
        raise ApplicationError("Too few labels on one side of the split.", field="held_out_share", code="too_few_labels")
    threshold, margin, train_figures = fitting.fit(train, max_wrong_pct=max_wrong_pct)
    with transaction.atomic():
        return FittedResolutionProfile.objects.create(
            embedding_model=model, resolve_threshold=threshold, margin=margin, max_wrong_pct=max_wrong_pct,
            gold_count=len(scores), train_count=len(train), held_out_count=len(held_out),
            baseline={"resolve_threshold": p["resolve_threshold"], "margin": p["margin"]},
            held_out_current=fitting.evaluate(held_out, p["resolve_threshold"], p["margin"]),
            held_out_fitted=fitting.evaluate(held_out, threshold, margin),
            train_fitted=train_figures,
        )


def resolution_profile_activate(*, fitted, reviewer=None):
    """Put a fitted profile live for its model (the one active before is retired)."""
    from feedback.models import FittedResolutionProfile
    from feedback.selectors import active_profile_cache_clear

    with transaction.atomic():
        row = FittedResolutionProfile.objects.select_for_update().get(pk=fitted.pk)
        if row.status == FittedResolutionProfile.Status.ACTIVE:
            return row
        FittedResolutionProfile.objects.filter(
            embedding_model=row.embedding_model, status=FittedResolutionProfile.Status.ACTIVE
        ).update(status=FittedResolutionProfile.Status.RETIRED)
        row.status = FittedResolutionProfile.Status.ACTIVE
        row.activated_at = timezone.now()
        row.activated_by = reviewer if getattr(reviewer, "pk", None) else None
        row.save(update_fields=["status", "activated_at", "activated_by"])
    active_profile_cache_clear()
    logger.info("fitted resolution profile %s is live for %s", row.pk, row.embedding_model)
    return row


def resolution_profile_retire(*, fitted):
    """Take a fitted profile out of service (the settings' values apply again)."""
    from feedback.models import FittedResolutionProfile
    from feedback.selectors import active_profile_cache_clear

    with transaction.atomic():
        FittedResolutionProfile.objects.filter(pk=fitted.pk).update(status=FittedResolutionProfile.Status.RETIRED)
    active_profile_cache_clear()
