"""Corrections and confirmations: what a user says about a resolution teaches that user's phrases. Each service is one
transaction."""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from common.api import ApplicationError, Conflict
from common.text import normalize_phrase
from embeddings.services import embeddings_compute, embeddings_refresh
from learning.models import LearnedPhrase, PhraseEvidence, Verb
from learning.resolution import profile
from learning.selectors import correction_decay_targets, phrase_owner
from learning.services.blocks import _verb_by_name, block_refusal_check
from learning.services.candidates import candidate_record, candidates_close_for_correction
from learning.services.decisions import resolution_answered_check, resolution_label
from learning.services.evidence import phrase_evidence_add, phrase_evidence_overrule
from learning.services.phrases import (
    _phrase_length_check,
    learned_phrase_lock_or_create,
    phrase_text_lock,
    phrase_texts_lock,
    user_learning_lock,
)

logger = logging.getLogger(__name__)


def phrase_correction_apply(*, text: str, wrong_verb: str, correct_verb: str, user_id: str | None, request_id=None) -> dict:
    """Learn from "``text`` meant ``correct_verb``, not ``wrong_verb``".

    With a user: the user's own phrase row for the text holds the correct verb afterwards (created at
    START + BOOST, re-pointed from another verb likewise, or boosted by BOOST up to CAP when it already
    holds it); the user's learned phrases for ``wrong_verb`` that the text matched (exact row before
    re-pointing, and semantic anchors within the learned threshold) decay ×DECAY down to FLOOR.
    Without a user (global data): occurrence counts move: the global row gains one when it holds the
    correct verb, loses one (down to 0) when it holds the wrong one; a missing or wrong global mapping
    becomes a pending LearningCandidate for reviewers. Global rows are never touched for a user.
    ``request_id`` (the resolve answer corrected) labels that answer for the decision fit; without it, the newest
    answer to the user for the text (``resolution_label``).
    """
    normalized = normalize_phrase(text)
    if not normalized:
        raise ApplicationError("The text is empty.", field="text")
    _phrase_length_check(text, normalized, field="text")
    if wrong_verb == correct_verb:
        raise ApplicationError("The wrong and the correct verb are the same.", field="correct_verb")
    wrong = _verb_by_name(wrong_verb, field="wrong_verb", retired_too=True)  # retired since it answered: still wrong
    correct = _verb_by_name(correct_verb, field="correct_verb")
    resolution_answered_check(request_id=request_id, user_id=user_id, text=text)

    vectors, model = embeddings_compute(texts=[normalized])
    # A global correction teaches nothing before review (a candidate, whose approval checks every block again):
    # a block it cannot compare with now (the embedder down) does not refuse it; one that applies does.
    block_refusal_check(
        text=text,
        normalized=normalized,
        verb=correct,
        user_id=user_id,
        vectors=vectors,
        model=model,
        field="correct_verb",
        comparable_only=user_id is None,
    )
    if user_id is None:
        result = _correction_global(text=text, normalized=normalized, wrong=wrong, correct=correct)
        with transaction.atomic():  # the decision's label: the resolution of this text was wrong (or asked wrongly)
            resolution_label(source="correction", gold_verb=correct.name, request_id=request_id, user_id=user_id, text=text)
        return result
    if vectors is not None:
        _own_rows_embed_again(user_id=user_id, wrong=wrong, correct=correct, model=model)
    with transaction.atomic():  # the user's phrase, anchors, evidence and label: an erasure of the user waits for all
        user_learning_lock(user_id=user_id)
        result = _correction_user(
            text=text, normalized=normalized, wrong=wrong, correct=correct, user_id=user_id, vectors=vectors, model=model
        )
        resolution_label(source="correction", gold_verb=correct.name, request_id=request_id, user_id=user_id, text=text)
    return result


# At most this many of a user's rows of each kind embedded again inside a correction (a user's phrases for one verb
# and evidence for two are far fewer); the backfill embeds the rest.
OWN_ROWS_EMBED_MAX = 500


def _own_rows_embed_again(*, user_id: str, wrong: Verb, correct: Verb, model: str) -> None:
    """After a change of embedding model, the user's own phrases for the verb turned down and evidence for both verbs
    that still carry the old model's vectors are embedded again now, not when the backfill reaches them: the
    correction compares its text with them (decay, overrule), and one that skipped them would never reach those
    paraphrases. Each row is written only if its text is still the one embedded (``embeddings_refresh``); nothing
    in a steady state but two index probes."""
    owner = phrase_owner(user_id)
    stale = [
        LearnedPhrase.objects.filter(user_id=user_id, private_agent_id=owner, verb=wrong, is_active=True),
        PhraseEvidence.objects.filter(user_id=user_id, private_agent_id=owner, verb__in=[wrong.name, correct.name]),
    ]
    for rows in stale:
        rows = list(rows.exclude(embedding_model=model).order_by("pk")[:OWN_ROWS_EMBED_MAX])
        if rows:
            embeddings_refresh(rows=rows)


def _correction_user(*, text: str, normalized: str, wrong: Verb, correct: Verb, user_id: str, vectors, model: str) -> dict:
    s = settings
    anchors: dict[int, str] = {}
    if vectors is not None:
        anchors = correction_decay_targets(
            vector=vectors[0],
            model=model,
            user_id=user_id,
            verb=wrong,
            exclude_normalized=normalized,
            threshold=profile(model)["correction_decay_threshold"],
        )
    decay = Greatest(Value(s.LEARNING_CORRECTION_FLOOR), F("confidence") * Value(s.LEARNING_CORRECTION_DECAY))
    fresh = min(s.LEARNING_CORRECTION_CAP, s.LEARNING_CORRECTION_START + s.LEARNING_CORRECTION_BOOST)
    with transaction.atomic():
        # The text and the anchors' texts, in one order: an approval of the text's candidate, or a click's learning
        # of an anchor's text (its evidence, then the phrase it promotes), waits or is waited for, never both
        phrase_texts_lock(texts=[normalized, *anchors.values()])
        # What the user's clicks proposed for the text and the user just turned down is no longer pending.
        candidates_close_for_correction(normalized=normalized, user_id=user_id, verb_name=wrong.name, text=text)
        # The user's phrase and the anchors to decay, in key order in one statement: two corrections (or a correction
        # and an import) that each hold one and want the other would deadlock.
        list(
            LearnedPhrase.objects.select_for_update()
            .filter(Q(pk__in=sorted(anchors)) | Q(normalized=normalized, user_id=user_id, private_agent_id=phrase_owner(user_id)))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        row, created = learned_phrase_lock_or_create(
            phrase=text,
            normalized=normalized,
            verb=correct,
            user_id=user_id,
            owner=phrase_owner(user_id),
            source="correction",
            confidence=fresh,
            vectors=vectors,
            model=model,
        )
        decayed_ids = sorted(anchors)
        if not created:
            qs = LearnedPhrase.objects.filter(pk=row.pk)
            if row.verb_id == correct.pk:
                qs.update(
                    confidence=Least(Value(s.LEARNING_CORRECTION_CAP), F("confidence") + Value(s.LEARNING_CORRECTION_BOOST)),
                    occurrence_count=F("occurrence_count") + 1,
                    is_active=True,
                    updated_at=timezone.now(),
                )
            else:
                # One verb per phrase per scope: the wrong mapping decays (kept in the history), then the row is
                # re-pointed to the verb the user said is right.
                was_wrong = row.verb_id == wrong.pk
                if was_wrong:
                    qs.update(confidence=decay, updated_at=timezone.now())
                    row.refresh_from_db()
                    LearnedPhrase.history.bulk_history_create(
                        [row], update=True, default_change_reason="correction: wrong mapping decayed"
                    )
                qs.update(
                    verb=correct,
                    confidence=Value(fresh),
                    occurrence_count=1,
                    is_active=True,
                    source="correction",
                    updated_at=timezone.now(),
                )
        if decayed_ids:
            locked = list(
                LearnedPhrase.objects.select_for_update()
                .filter(pk__in=decayed_ids, user_id=user_id, private_agent_id=phrase_owner(user_id), verb=wrong)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            LearnedPhrase.objects.filter(pk__in=locked).update(confidence=decay, updated_at=timezone.now())
            decayed_ids = locked
        touched = list(LearnedPhrase.objects.filter(pk__in=[row.pk, *decayed_ids]).select_related("verb").order_by("pk"))
        if touched and not created:
            LearnedPhrase.history.bulk_history_create(touched, update=True, default_change_reason="correction")
        elif len(touched) > 1:
            LearnedPhrase.history.bulk_history_create(
                [t for t in touched if t.pk != row.pk], update=True, default_change_reason="correction"
            )
        if vectors is not None:  # what clicks taught near the text no longer holds the right verb down
            phrase_evidence_overrule(
                user_id=user_id,
                vector=vectors[0],
                model=model,
                right_verb=correct.name,
                wrong_verb=wrong.name,
                similarity=profile(model)["decide_similarity"],  # near-paraphrases: the variants a click taught
            )
        _positive_evidence_add(user_id=user_id, text=text, verb=correct, vectors=vectors, model=model, weight=fresh)
    by_pk = {t.pk: t for t in touched}
    phrase = by_pk[row.pk]
    return {
        "scope": "user",
        "user_id": user_id,
        "phrase": _phrase_state(phrase),
        "created": created,
        "decayed": [_phrase_state(by_pk[pk]) for pk in decayed_ids if pk in by_pk],
        "candidate_id": None,
    }


def phrase_confirmation_apply(*, text: str, verb: str, user_id: str, request_id=None) -> dict:
    """Learn from "the user accepted ``verb`` for ``text``" (the agent ran it and the user did not correct it).

    The user's own phrase row for the text holds the verb afterwards: created at
    LEARNING_CONFIRMATION_CONFIDENCE, or, when it already holds the verb, counted once more and raised
    by LEARNING_CONFIRMATION_BOOST up to LEARNING_CORRECTION_CAP. A confirmation never overrides what
    a correction, a click or a reviewer decided: a row holding another verb, or switched off, answers
    409 and stays as it is. Global rows are never touched (they change through review only).
    ``request_id`` (the resolve answer accepted) labels that answer for the decision fit; without it, the newest
    answer to the user for the text (``resolution_label``).
    """
    normalized = normalize_phrase(text)
    if not normalized:
        raise ApplicationError("The text is empty.", field="text")
    _phrase_length_check(text, normalized, field="text")
    if not user_id:
        raise ApplicationError("A confirmation needs the user_id of the user who accepted the verb.", field="user_id")
    target = _verb_by_name(verb, field="verb")
    resolution_answered_check(request_id=request_id, user_id=user_id, text=text)

    vectors, model = embeddings_compute(texts=[normalized])
    block_refusal_check(
        text=text, normalized=normalized, verb=target, user_id=user_id, vectors=vectors, model=model, field="verb"
    )
    s = settings
    with transaction.atomic():
        user_learning_lock(user_id=user_id)  # an erasure of the user waits for the phrase, evidence and label, or runs first
        # a click's learning of the text (its evidence, then the phrase) waits, or is waited for: no crossed row locks
        phrase_text_lock(normalized=normalized)
        row, created = learned_phrase_lock_or_create(
            phrase=text,
            normalized=normalized,
            owner=phrase_owner(user_id),
            verb=target,
            user_id=user_id,
            confidence=s.LEARNING_CONFIRMATION_CONFIDENCE,
            vectors=vectors,
            model=model,
            source="confirmation",
        )
        if not created:
            if row.verb_id != target.pk:
                raise Conflict(
                    f"The user's phrase {row.phrase!r} maps to {row.verb.name}; send a correction to change it.",
                    field="verb",
                    code="conflicting_phrase",
                )
            if not row.is_active:
                raise Conflict(
                    f"The user's phrase {row.phrase!r} was switched off; a confirmation does not restore it.",
                    field="text",
                    code="inactive_phrase",
                )
            LearnedPhrase.objects.filter(pk=row.pk).update(
                confidence=Least(Value(s.LEARNING_CORRECTION_CAP), F("confidence") + Value(s.LEARNING_CONFIRMATION_BOOST)),
                occurrence_count=F("occurrence_count") + 1,
                updated_at=timezone.now(),
            )
            row.refresh_from_db()
            LearnedPhrase.history.bulk_history_create([row], update=True, default_change_reason="confirmation")
        _positive_evidence_add(
            user_id=user_id, text=text, verb=target, vectors=vectors, model=model, weight=s.LEARNING_CONFIRMATION_CONFIDENCE
        )
        resolution_label(source="confirmation", gold_verb=target.name, request_id=request_id, user_id=user_id, text=text)
    return {"user_id": user_id, "phrase": _phrase_state(row), "created": created}


def _positive_evidence_add(*, user_id: str, text: str, verb: Verb, vectors, model: str, weight: float) -> None:
    """The user accepted ``verb`` for ``text``: positive feedback evidence, which offsets the negative evidence of
    options this user passed over for similar phrases (feedback.selectors.verb_evidence_balance)."""

    phrase_evidence_add(
        user_id=user_id,
        phrase=text,
        verb=verb.name,
        positive=weight,
        vector=vectors[0] if vectors is not None else None,
        model=model,
    )


def _correction_global(*, text: str, normalized: str, wrong: Verb, correct: Verb) -> dict:
    candidate = None
    with transaction.atomic():
        phrase_text_lock(normalized=normalized)  # an approval of the text's candidate waits, or is waited for
        row = LearnedPhrase.objects.select_for_update().filter(normalized=normalized, user_id__isnull=True).first()
        if row is not None and row.verb_id == correct.pk:
            LearnedPhrase.objects.filter(pk=row.pk).update(occurrence_count=F("occurrence_count") + 1, updated_at=timezone.now())
        elif row is not None and row.verb_id == wrong.pk:
            LearnedPhrase.objects.filter(pk=row.pk).update(
                occurrence_count=Case(When(occurrence_count__gt=0, then=F("occurrence_count") - 1), default=Value(0)),
                updated_at=timezone.now(),
            )
        if row is not None:
            row.refresh_from_db()
            LearnedPhrase.history.bulk_history_create([row], update=True, default_change_reason="correction")
        if row is None or row.verb_id != correct.pk:
            candidate = candidate_record(
                input_pattern=text,
                suggested_output=correct.name,
                user_id=None,
                source="correction",
                confidence=settings.LEARNING_CORRECTION_CANDIDATE_CONFIDENCE,
                previous_output=wrong.name,
                rejected_alternatives=[wrong.name],
            )
    return {
        "scope": "global",
        "user_id": None,
        "phrase": _phrase_state(row) if row is not None else None,
        "created": False,
        "decayed": [],
        "candidate_id": candidate.pk if candidate else None,
    }


def _phrase_state(row: LearnedPhrase) -> dict:
    return {
        "id": row.pk,
        "phrase": row.phrase,
        "verb": row.verb.name,
        "user_id": row.user_id,
        "confidence": round(row.confidence, 6),
        "occurrence_count": row.occurrence_count,
    }
