"""Writes of disambiguation requests: record an ambiguous answer, select, abandon, expire, and learn from the signals."""

import logging
import uuid
from dataclasses import asdict

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from agents.models import Agent
from common.api import ApplicationError, Conflict, NotFound
from common.db import ASYNC_COMMIT, row_insert, rows_delete_in_batches, rows_insert
from common.tasks import task_send_on_commit
from common.text import normalize_phrase
from embeddings.services import embeddings_compute
from learning.models import AbandonEvent, DisambiguationRequest, LearningCandidate, LearningSignal, Verb
from learning.services.candidates import candidate_approve, candidate_record, candidate_text_fits
from learning.services.decisions import resolution_label, resolution_row
from learning.services.evidence import phrase_evidence_add_many
from learning.services.phrases import phrase_texts_lock
from learning.variants import phrase_variants
from tenants.context import acting_agent, tenant_scope

# Flow: learning.api.ResolveApi (and the console, MCP) -> resolution_store -> a resolution record (every answer)
# and a disambiguation request (every ambiguous answer), one round trip;
# select/abandon endpoints -> disambiguation_select / disambiguation_abandon (status +
# learning signals, one transaction) -> feedback.tasks.disambiguation_signals_process_task
# (on commit; eager by default) -> disambiguation_signals_process: positive signals
# become learning candidates (>= accumulate) and are promoted at once (>= auto-promote,
# user scope only); every signal adds to PhraseEvidence, which the resolver reads to
# penalise verbs users turned down for similar phrases.


logger = logging.getLogger(__name__)


def _disambiguation_row(*, resolution, agent, domain: str | None, channel: str) -> DisambiguationRequest | None:
    if resolution.outcome != "ambiguous":
        return None
    return DisambiguationRequest(
        request_id=uuid.UUID(resolution.request_id),
        agent=agent,
        channel=channel,
        user_id=resolution.user_id,
        text=resolution.text[:2000],
        normalized=normalize_phrase(resolution.text)[:2000],
        domain=domain or "",
        options=[asdict(o) for o in resolution.options],
    )


def disambiguation_record(
    *, resolution, agent=None, domain: str | None = None, channel: str = "api"
) -> DisambiguationRequest | None:
    """Store an ``ambiguous`` resolution with the options shown (None for other outcomes).

    The commit does not wait for the write-ahead log to reach disk (``synchronous_commit = off`` for
    this transaction only): it sits on the resolve path, and a database crash can at worst lose the
    last fraction of a second of open requests, whose select or abandon then answers 404; it never
    corrupts anything. Every other write keeps the server's setting."""
    request = _disambiguation_row(resolution=resolution, agent=agent, domain=domain, channel=channel)
    if request is not None:
        with transaction.atomic(savepoint=False):  # inside a request: its transaction, no savepoint round trips
            row_insert(request, before=ASYNC_COMMIT)  # a plain INSERT (no signals or history on this model)
    return request


def resolution_store(*, resolution, agent=None, domain: str | None = None, channel: str = "api") -> None:
    """Store what a resolve answered, in one transaction: the resolution with its explanation (every answer, so a
    later click, abandon, confirmation or correction labels it for the decision fit) and, for an ``ambiguous``
    answer, the request with the options shown (as ``disambiguation_record`` stores it). Every interface that resolves (REST,
    console, MCP) calls this. Both rows are plain INSERTs sent in one round trip (``common.db.rows_insert``)."""
    rows = [
        _disambiguation_row(resolution=resolution, agent=agent, domain=domain, channel=channel),
        resolution_row(resolution=resolution, agent=agent, domain=domain),
    ]
    with transaction.atomic(savepoint=False):  # inside a request: its transaction, no savepoint round trips
        rows_insert([row for row in rows if row is not None], before=ASYNC_COMMIT)


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
        message,
        field="request_id",
        code="already_answered",
        extra={"status": row.status, "selected_verb": row.selected_verb or None},
    )


def _signals_enqueue(request_pk: int) -> None:
    task_send_on_commit("learning.disambiguation_signals_process", request_pk)


def disambiguation_select(
    *,
    request_id,
    selected_verb: str,
    args: dict | None = None,
    agent_id: int | None = None,
    user_id: str | None = None,
    channel: str = "api",
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
                f"{selected_verb!r} was not one of the options offered: {', '.join(offered)}.",
                field="selected_verb",
                code="not_offered",
            )
        if not Verb.objects.filter(name=selected_verb, is_active=True).exists():
            raise Conflict(
                f"{selected_verb!r} is no longer an active verb (the catalogue changed since the options were shown); "
                "resolve the text again.",
                field="selected_verb",
                code="verb_inactive",
            )
        rejected = [v for v in offered if v != selected_verb]
        row.status = DisambiguationRequest.Status.SELECTED
        row.selected_verb = selected_verb
        row.selected_args = args or {}
        row.answered_at = timezone.now()
        row.save(update_fields=["status", "selected_verb", "selected_args", "answered_at"])

        def signal(phrase, verb, outcome, source, confidence, negative=False, alternatives=()):
            return LearningSignal(
                request=row,
                user_id=row.user_id,
                phrase=phrase[:2000],
                normalized=normalize_phrase(phrase)[:2000],  # NFKC and casefolding can lengthen it
                verb=verb,
                outcome=outcome,
                source=source,
                confidence=confidence,
                is_negative=negative,
                rejected_alternatives=list(alternatives),
            )

        Outcome, S = LearningSignal.Outcome, LearningSignal.Source
        signals = [
            signal(row.text, selected_verb, Outcome.SELECTED_ALT, S.USER_DISAMBIGUATION, c["selected"], alternatives=rejected)
        ]
        signals += [
            signal(v, selected_verb, Outcome.GENERATED_VARIANT, S.GENERATED_VARIANT, c["variant"], alternatives=rejected)
            for v in phrase_variants(row.normalized, limit=settings.FEEDBACK_MAX_VARIANTS)
        ]
        signals += [
            signal(row.text, v, Outcome.REJECTED_ALT, S.USER_DISAMBIGUATION, c["rejected"], negative=True) for v in rejected
        ]
        LearningSignal.objects.bulk_create(signals, ignore_conflicts=True)
        resolution_label(source="click", gold_verb=selected_verb, request_id=row.request_id)
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
                    request=row,
                    user_id=row.user_id,
                    phrase=row.text,
                    normalized=row.normalized,
                    verb=verb,
                    outcome=LearningSignal.Outcome.ABANDONED,
                    source=LearningSignal.Source.USER_ABANDONMENT,
                    confidence=settings.FEEDBACK_SIGNAL_CONFIDENCE["abandoned"],
                    is_negative=True,
                )
                for verb in row.option_verbs
            ],
            ignore_conflicts=True,
        )
        resolution_label(source="abandon", request_id=row.request_id)
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


def disambiguations_purge(*, days: int | None = None) -> int:
    """Delete the ambiguous answers (with their signals and abandon events) older than RESOLUTION_RETENTION_DAYS,
    as the resolution records they belong to; answers how many. What they taught stays (learned phrases, evidence,
    candidates with their counts); a candidate's review lists the interactions within the retention. Kept whatever
    their age: an open one, and one whose signals are not all learned from yet."""
    days = settings.RESOLUTION_RETENTION_DAYS if days is None else days
    if days < 1:
        raise ApplicationError(f"The retention of ambiguous answers must be at least 1 day (got {days}).", field="days")
    unlearned = LearningSignal.objects.filter(request=OuterRef("pk"), processed_at__isnull=True)
    old = (
        DisambiguationRequest.objects.filter(created_at__lt=timezone.now() - timezone.timedelta(days=days))
        .exclude(status=DisambiguationRequest.Status.OPEN)
        .exclude(Exists(unlearned))
    )
    count = rows_delete_in_batches(old)
    if count:
        logger.info("purged %d ambiguous answer(s) older than %d day(s), with their signals", count, days)
    return count


# A request whose signals fail to process is tried again after 5, 10, 20, 40 minutes, then left (logged as an error,
# listed in the admin with its failures): newer clicks are learned from meanwhile.
SWEEP_MAX_FAILURES = 5
SWEEP_BACKOFF = timezone.timedelta(minutes=5)


def disambiguation_signals_sweep(*, older_than_s: float | None = None, limit: int = 500) -> dict:
    """Learn from answered requests whose signals no task has processed after ``older_than_s`` seconds
    (``FEEDBACK_SIGNAL_SWEEP_AFTER_S``): a lost message, a worker that died, work that failed. Each request in its
    own tenant's scope, as the agent that answered it (as the task sent at the time would have run); one request's
    failure is logged and the others still run. Answers {"processed": n, "failed": n}."""
    age = settings.FEEDBACK_SIGNAL_SWEEP_AFTER_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timezone.timedelta(seconds=age)
    now = timezone.now()
    rows = list(
        DisambiguationRequest.objects.filter(
            processed_at__isnull=True, signals__processed_at__isnull=True, signals__created_at__lte=cutoff
        )
        .filter(Q(sweep_after__isnull=True) | Q(sweep_after__lte=now), sweep_failures__lt=SWEEP_MAX_FAILURES)
        .values_list("pk", "tenant_id", "agent_id", "sweep_failures")
        .distinct()
        .order_by("sweep_failures", "pk")[:limit]  # the ones that never failed first: a failing one never blocks them
    )
    agents = Agent.objects.in_bulk({agent_id for _, _, agent_id, _ in rows if agent_id is not None})
    counts = {"processed": 0, "failed": 0}
    for pk, tenant_id, agent_id, failures in rows:
        try:
            with tenant_scope([tenant_id]), acting_agent(agents.get(agent_id)):
                disambiguation_signals_process(request_pk=pk)
            counts["processed"] += 1
        except Exception:
            counts["failed"] += 1
            failures += 1
            if failures >= SWEEP_MAX_FAILURES:
                logger.exception("disambiguation request %s: its signals failed %d times; no sweep tries again", pk, failures)
            else:
                logger.exception("disambiguation request %s: its signals failed to process; tried again later", pk)
            with tenant_scope([tenant_id]):
                DisambiguationRequest.objects.filter(pk=pk).update(  # counted in the row: two sweeps lose no failure
                    sweep_failures=F("sweep_failures") + 1, sweep_after=now + SWEEP_BACKOFF * 2 ** (failures - 1)
                )
    if rows:
        logger.info("signal sweep: %s", counts)
    return counts


def disambiguation_signals_process(*, request_pk: int) -> dict:
    """Learn from one request's signals, once (idempotent per request; safe to run twice or concurrently)."""

    pending = list(LearningSignal.objects.filter(request_id=request_pk, processed_at__isnull=True).order_by("id"))
    counts = {"promoted": 0, "accumulated": 0, "evidence": 0, "ignored": 0, "already_processed": False}
    # Vectors first, outside the transaction (the embedder's cache serves the nested services too).
    evidence_texts = sorted({s.normalized for s in pending})
    vectors, model = embeddings_compute(texts=evidence_texts)
    vector_of = dict(zip(evidence_texts, vectors, strict=False)) if vectors else {}
    auto, accumulate = settings.FEEDBACK_AUTO_PROMOTE_CONFIDENCE, settings.FEEDBACK_ACCUMULATE_CONFIDENCE

    with transaction.atomic():
        row = DisambiguationRequest.objects.select_for_update().filter(pk=request_pk).first()
        if row is None or row.processed_at is not None:
            counts["already_processed"] = row is not None
            return counts
        phrase_texts_lock(texts=[s.normalized for s in pending])  # in one order: a correction takes one of them first
        now = timezone.now()
        rejected_confidence = settings.FEEDBACK_SIGNAL_CONFIDENCE["rejected"]
        evidence = []
        for s in pending:
            vector = vector_of.get(s.normalized)
            evidence.append(
                {
                    "user_id": s.user_id,
                    "phrase": s.phrase,
                    "verb": s.verb,
                    "vector": vector,
                    "negative": s.confidence if s.is_negative else 0.0,
                    "positive": 0.0 if s.is_negative else s.confidence,
                }
            )
            if s.outcome == LearningSignal.Outcome.GENERATED_VARIANT:
                # A paraphrase of a phrase whose alternatives the user turned down: the
                # rejection carries over, discounted by the variant's own confidence.
                evidence.extend(
                    {
                        "user_id": s.user_id,
                        "phrase": s.phrase,
                        "verb": alternative,
                        "vector": vector,
                        "negative": round(s.confidence * rejected_confidence, 4),
                        "positive": 0.0,
                    }
                    for alternative in s.rejected_alternatives
                )
        phrase_evidence_add_many(rows=evidence, model=model)
        for s in pending:
            if s.is_negative:
                s.result = LearningSignal.Result.EVIDENCE
            elif s.confidence < accumulate:
                s.result = LearningSignal.Result.IGNORED
            elif not candidate_text_fits(s.phrase):
                # Longer than a candidate or a learned phrase holds: no phrase to learn; the evidence above stays.
                logger.info(
                    "disambiguation %s: %d-character text too long for a candidate; skipped", row.request_id, len(s.phrase)
                )
                s.result = LearningSignal.Result.IGNORED
            else:
                # Gold labels count toward a global candidate a reviewer decides on.
                if s.outcome == LearningSignal.Outcome.SELECTED_ALT and s.user_id:
                    s.global_candidate_id = candidate_record(
                        input_pattern=s.phrase,
                        suggested_output=s.verb,
                        user_id=None,
                        source=s.source,
                        confidence=s.confidence,
                        rejected_alternatives=s.rejected_alternatives,
                    ).pk
                candidate = candidate_record(
                    input_pattern=s.phrase,
                    suggested_output=s.verb,
                    user_id=s.user_id,
                    source=s.source,
                    confidence=s.confidence,
                    rejected_alternatives=s.rejected_alternatives,
                )
                s.candidate_id = candidate.pk
                # Only a user's own scope is changed without review.
                s.result = LearningSignal.Result.ACCUMULATED
                if s.user_id and candidate.confidence >= auto and candidate.status == LearningCandidate.Status.PENDING:
                    try:
                        with transaction.atomic():  # a savepoint: a refused promotion keeps the rest of the learning
                            candidate_approve(candidate=candidate, automatic=True)
                        s.result = LearningSignal.Result.PROMOTED
                    except ApplicationError as exc:  # a block, a verb retired, a phrase taught on purpose: a reviewer decides
                        logger.info("candidate %s not promoted, left to review: %s", candidate.pk, exc.message)
            s.processed_at = now
            counts[s.result] += 1
        LearningSignal.objects.bulk_update(pending, ["result", "candidate_id", "global_candidate_id", "processed_at"])
        row.processed_at = now
        row.save(update_fields=["processed_at"])
    logger.info("disambiguation %s learned from: %s", row.request_id, counts)
    return counts
