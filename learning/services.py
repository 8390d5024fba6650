"""Writes for the learning app. Each service is one transaction.

Vectors are computed before the transaction opens (the embedder is slow and
may fail); when it fails the row is still written, without a vector, and
``backfill_embeddings`` (or the Celery task) embeds it later.
"""

import logging
from typing import Iterable, Sequence

from django.db import transaction
from django.db.models import Model

from learning.catalogue import VerbEntry
from learning.embeddings import EmbeddingError, get_embedder
from learning.models import LearnedPhrase, PhraseBlock, Verb, VerbPhrase
from learning.selectors import verb_details_forget
from learning.text import normalize_phrase, text_hash

logger = logging.getLogger(__name__)


def embeddings_compute(texts: Sequence[str]) -> tuple[list | None, str]:
    """Vectors for ``texts`` (None if the embedder fails) and the model name."""
    if not texts:
        return [], ""
    try:
        embedder = get_embedder()
        return embedder.embed_batch(list(texts)), embedder.model_name
    except EmbeddingError as exc:
        logger.warning("embedding %d texts failed, rows stay unembedded: %s", len(texts), exc)
        return None, ""


def embedding_assign(rows: Sequence[Model], vectors: list | None, model: str) -> None:
    """Set vector, model and text hash on unsaved rows (no-op without vectors)."""
    if vectors is None:
        return
    for row, vector in zip(rows, vectors):
        row.embedding = vector
        row.embedding_model = model
        row.embedding_hash = text_hash(row.embedding_text)


def embeddings_refresh(*, rows: Sequence[Model]) -> int:
    """Embed ``rows`` (all of one model) and save only their vector fields; answer how many were embedded."""
    if not rows:
        return 0
    vectors, model = embeddings_compute([r.embedding_text for r in rows])
    if vectors is None:
        return 0
    embedding_assign(rows, vectors, model)
    with transaction.atomic():
        type(rows[0]).objects.bulk_update(rows, ["embedding", "embedding_model", "embedding_hash"])
    return len(rows)


def verb_catalogue_load(*, entries: Iterable[VerbEntry]) -> dict:
    """Create or update verbs and their phrases, all or nothing. Answers counts."""
    entries = list(entries)
    wanted = {e.name: [(p, normalize_phrase(p)) for p in e.phrases] for e in entries}
    existing = {
        (v, n) for v, n in VerbPhrase.objects.filter(verb__name__in=wanted).values_list("verb__name", "normalized")
    }
    new_phrases = []
    for name, phrases in wanted.items():
        seen = set()
        for text, norm in phrases:
            if norm and (name, norm) not in existing and norm not in seen:
                seen.add(norm)
                new_phrases.append((name, text, norm))
    vectors, model = embeddings_compute([n for _, _, n in new_phrases])

    counts = {"verbs_created": 0, "verbs_updated": 0, "phrases_added": len(new_phrases), "unembedded": 0}
    with transaction.atomic():
        verbs = {}
        for e in entries:
            verb, created = Verb.objects.update_or_create(
                name=e.name,
                defaults={"domain": e.domain, "display_name": e.display_name, "description": e.description, "is_active": e.is_active},
            )
            counts["verbs_created" if created else "verbs_updated"] += 1
            verbs[e.name] = verb
        rows = [VerbPhrase(verb=verbs[name], text=text, normalized=norm) for name, text, norm in new_phrases]
        embedding_assign(rows, vectors, model)
        VerbPhrase.objects.bulk_create(rows, ignore_conflicts=True)
        transaction.on_commit(verb_details_forget)
    if vectors is None:
        counts["unembedded"] = len(rows)
    return counts


def learned_phrase_upsert(
    *, phrase: str, verb: Verb, user_id: str | None = None, source: str = "manual", confidence: float = 1.0
) -> LearnedPhrase:
    """Teach ``phrase`` → ``verb`` for the user (or globally). A phrase already mapped in that scope is re-pointed."""
    normalized = normalize_phrase(phrase)
    vectors, model = embeddings_compute([normalized])
    with transaction.atomic():
        row, created = LearnedPhrase.objects.select_for_update().get_or_create(
            normalized=normalized,
            user_id=user_id,
            defaults={"phrase": phrase.strip(), "verb": verb, "source": source, "confidence": confidence},
        )
        if not created:
            row.verb = verb
            row.phrase = phrase.strip()
            row.source = source
            row.confidence = confidence
            row.is_active = True
        embedding_assign([row], vectors, model)
        row.save()
    return row


def phrase_block_create(
    *, phrase: str, verb: Verb, user_id: str | None = None, reason: str = "", source: str = "manual", expires_at=None
) -> PhraseBlock:
    """Block ``verb`` for ``phrase`` and its paraphrases (globally or for one user)."""
    normalized = normalize_phrase(phrase)
    vectors, model = embeddings_compute([normalized])
    with transaction.atomic():
        block, _ = PhraseBlock.objects.select_for_update().get_or_create(
            normalized=normalized,
            verb=verb,
            user_id=user_id,
            defaults={"phrase": phrase.strip(), "reason": reason, "source": source, "expires_at": expires_at},
        )
        block.reason, block.source, block.expires_at = reason, source, expires_at
        embedding_assign([block], vectors, model)
        block.save()
    return block


# --- Learning governance (issue 3, gov): candidates, blocklist, corrections -------

from django.conf import settings  # noqa: E402
from django.db import IntegrityError  # noqa: E402
from django.db.models import Case, F, Value, When  # noqa: E402
from django.db.models.functions import Greatest, Least  # noqa: E402
from django.utils import timezone  # noqa: E402

from config.api import ApplicationError, Conflict, NotFound  # noqa: E402
from learning.models import EntityAlias, LearningCandidate  # noqa: E402

_RISK_ORDER = {"low": 0, "medium": 1, "high": 2}


def _learned_phrase_put(
    *, phrase: str, normalized: str, verb: Verb, user_id: str | None, source: str, confidence: float,
    vectors: list | None, model: str, occurrence_count: int = 1, history_user=None,
) -> tuple[LearnedPhrase, str]:
    """Inside a transaction: create or re-point the phrase in its scope. Answers (row, "added"|"updated"|"unchanged")."""
    row = LearnedPhrase.objects.select_for_update().filter(normalized=normalized, user_id=user_id).first()
    outcome = "updated"
    if row is None:
        row = LearnedPhrase(normalized=normalized, user_id=user_id, occurrence_count=occurrence_count)
        outcome = "added"
    elif row.verb_id == verb.pk and row.is_active and row.confidence == confidence and row.embedding is not None:
        return row, "unchanged"
    row.phrase, row.verb, row.source, row.confidence, row.is_active = phrase.strip(), verb, source, confidence, True
    embedding_assign([row], vectors, model)
    row._history_user = history_user
    row.save()
    return row, outcome


def _candidate_check_open(candidate: LearningCandidate, *, allowed: tuple[str, ...]) -> None:
    if candidate.status not in allowed:
        raise Conflict(
            f"Candidate {candidate.pk} is already {candidate.status}.",
            field="status",
            code="invalid_status",
            extra={"status": candidate.status},
        )


def _candidate_verb(candidate: LearningCandidate) -> Verb:
    verb = Verb.objects.filter(name=candidate.suggested_output, is_active=True).first()
    if verb is None:
        raise ApplicationError(f"Unknown or inactive verb {candidate.suggested_output!r}.", field="suggested_output", code="unknown_verb")
    return verb


def candidate_record(
    *,
    candidate_type: str = LearningCandidate.Type.INVOCATION_PHRASE,
    input_pattern: str,
    suggested_output: str,
    user_id: str | None,
    source: str,
    confidence: float,
    previous_output: str = "",
    rejected_alternatives: list[str] | None = None,
    risk_level: str = LearningCandidate.Risk.LOW,
    explanation: str = "",
) -> LearningCandidate:
    """Create the pending candidate or, for a proposal already pending, raise its occurrences atomically.

    Confidences of repeated proposals combine as a noisy-OR: ``1 - (1 - old) * (1 - new)``.
    """
    if candidate_type not in LearningCandidate.Type.values:
        raise ApplicationError(f"Unknown candidate type {candidate_type!r}.", field="candidate_type")
    if risk_level not in LearningCandidate.Risk.values:
        raise ApplicationError(f"Unknown risk level {risk_level!r}.", field="risk_level")
    if not 0.0 <= confidence <= 1.0:
        raise ApplicationError("Confidence must be between 0 and 1.", field="confidence")
    normalized = normalize_phrase(input_pattern)
    suggested_output = suggested_output.strip()
    if not normalized:
        raise ApplicationError("The input pattern is empty.", field="input_pattern")
    if not suggested_output:
        raise ApplicationError("The suggested output is empty.", field="suggested_output")
    alternatives = [str(a) for a in (rejected_alternatives or [])]
    key = {"candidate_type": candidate_type, "normalized": normalized, "suggested_output": suggested_output, "user_id": user_id}
    pending = LearningCandidate.objects.filter(status=LearningCandidate.Status.PENDING, **key)

    with transaction.atomic():
        for _attempt in range(3):
            row = pending.select_for_update().first()
            if row is not None:
                break
            try:
                with transaction.atomic():
                    return LearningCandidate.objects.create(
                        **key,
                        input_pattern=input_pattern.strip(),
                        previous_output=previous_output,
                        confidence=confidence,
                        source=source,
                        risk_level=risk_level,
                        rejected_alternatives=alternatives,
                        explanation=explanation,
                    )
            except IntegrityError:
                continue  # another connection created it meanwhile: bump that row instead
        else:
            raise Conflict("The candidate changed meanwhile; retry.", field="input_pattern")
        LearningCandidate.objects.filter(pk=row.pk).update(
            occurrence_count=F("occurrence_count") + 1,
            confidence=Least(Value(1.0), Value(1.0) - (Value(1.0) - F("confidence")) * Value(1.0 - confidence)),
            last_seen_at=timezone.now(),
            updated_at=timezone.now(),
        )
        row.refresh_from_db()
        # The row is locked until commit, so merging the small text fields here is safe.
        changed = []
        merged = row.rejected_alternatives + [a for a in alternatives if a not in row.rejected_alternatives]
        if merged != row.rejected_alternatives:
            row.rejected_alternatives = merged
            changed.append("rejected_alternatives")
        if _RISK_ORDER[risk_level] > _RISK_ORDER.get(row.risk_level, 0):
            row.risk_level = risk_level
            changed.append("risk_level")
        if explanation and explanation != row.explanation:
            row.explanation = explanation
            changed.append("explanation")
        if previous_output and not row.previous_output:
            row.previous_output = previous_output
            changed.append("previous_output")
        row.save(update_fields=changed or None)  # also writes the history record of the bump
    return row


def _decided_by(row, *, reviewer, agent) -> None:
    """Record who decided (a Django user in the admin, or the agent whose key called the API) and when."""
    row.reviewed_by, row.reviewed_by_agent, row.reviewed_at = reviewer, agent, timezone.now()
    row._history_user = reviewer
    if agent is not None:
        row._change_reason = f"API, agent {agent.name}"


def candidate_approve(
    *, candidate: LearningCandidate, reviewer=None, apply_immediately: bool = True, agent=None
) -> LearningCandidate:
    """Approve a candidate; by default apply it at once (learned phrase or alias with its vector, status ``applied``).

    ``reviewer`` is the Django user (admin), ``agent`` the agent whose governance key called the API; both None
    for automatic promotion.
    """
    _candidate_check_open(candidate, allowed=(LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED))
    vectors, model = embeddings_compute([candidate.normalized]) if apply_immediately else (None, "")
    with transaction.atomic():
        row = LearningCandidate.objects.select_for_update().get(pk=candidate.pk)
        _candidate_check_open(row, allowed=(LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED))
        if row.status == LearningCandidate.Status.APPROVED and not apply_immediately:
            return row
        if apply_immediately:
            _candidate_apply(row, vectors=vectors, model=model, reviewer=reviewer)
            row.status = LearningCandidate.Status.APPLIED
        else:
            row.status = LearningCandidate.Status.APPROVED
        _decided_by(row, reviewer=reviewer, agent=agent)
        row.save()
    return row


def _candidate_apply(row: LearningCandidate, *, vectors, model: str, reviewer) -> None:
    if row.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        alias = EntityAlias.objects.select_for_update().filter(normalized=row.normalized, entity_type="entity", user_id=row.user_id).first()
        alias = alias or EntityAlias(normalized=row.normalized, entity_type="entity", user_id=row.user_id)
        alias.alias, alias.canonical_name, alias.source = row.input_pattern, row.suggested_output, "candidate"
        alias.confidence, alias.occurrence_count, alias.is_active = settings.LEARNING_APPROVED_CONFIDENCE, row.occurrence_count, True
        embedding_assign([alias], vectors, model)
        alias._history_user = reviewer
        alias.save()
        return
    verb = _candidate_verb(row)
    from learning.selectors import active_blocks

    if active_blocks(user_id=row.user_id).filter(normalized=row.normalized, verb=verb).exists():
        raise Conflict(
            f"A blocklist entry forbids {row.input_pattern!r} → {verb.name}; remove the block first.",
            field="suggested_output",
            code="blocked",
        )
    _learned_phrase_put(
        phrase=row.input_pattern, normalized=row.normalized, verb=verb, user_id=row.user_id, source="candidate",
        confidence=settings.LEARNING_APPROVED_CONFIDENCE, vectors=vectors, model=model,
        occurrence_count=row.occurrence_count, history_user=reviewer,
    )


def candidate_reject(
    *, candidate: LearningCandidate, reviewer=None, reason: str = "", add_to_blocklist: bool = False, agent=None
) -> LearningCandidate:
    """Reject a candidate with a reason; optionally block its phrase → verb (and paraphrases) in its scope."""
    allowed = (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED)
    _candidate_check_open(candidate, allowed=allowed)
    if add_to_blocklist and candidate.candidate_type != LearningCandidate.Type.INVOCATION_PHRASE:
        raise ApplicationError("Only invocation phrases can be blocklisted.", field="add_to_blocklist")
    verb = _candidate_verb(candidate) if add_to_blocklist else None
    vectors, model = embeddings_compute([candidate.normalized]) if add_to_blocklist else (None, "")
    with transaction.atomic():
        row = LearningCandidate.objects.select_for_update().get(pk=candidate.pk)
        _candidate_check_open(row, allowed=allowed)
        row.status, row.review_reason = LearningCandidate.Status.REJECTED, reason
        _decided_by(row, reviewer=reviewer, agent=agent)
        row.save()
        if verb is not None:
            _phrase_block_put(
                phrase=row.input_pattern, normalized=row.normalized, verb=verb, user_id=row.user_id,
                reason=reason or f"rejected candidate {row.pk}", source="candidate", expires_at=None,
                vectors=vectors, model=model, history_user=reviewer,
            )
    return row


def candidate_get(*, candidate_id: int) -> LearningCandidate:
    row = LearningCandidate.objects.filter(pk=candidate_id).first()
    if row is None:
        raise NotFound(f"No learning candidate {candidate_id}.", field="id")
    return row


def _phrase_block_put(
    *, phrase: str, normalized: str, verb: Verb, user_id: str | None, reason: str, source: str, expires_at,
    vectors, model: str, history_user=None,
) -> PhraseBlock:
    """Inside a transaction: create or refresh the block of ``verb`` for the phrase in its scope."""
    block = PhraseBlock.objects.select_for_update().filter(normalized=normalized, verb=verb, user_id=user_id).first()
    block = block or PhraseBlock(normalized=normalized, verb=verb, user_id=user_id)
    block.phrase, block.reason, block.source, block.expires_at = phrase.strip(), reason, source, expires_at
    embedding_assign([block], vectors, model)
    block._history_user = history_user
    block.save()
    return block


def _verb_by_name(name: str, *, field: str) -> Verb:
    verb = Verb.objects.filter(name=name, is_active=True).first()
    if verb is None:
        raise ApplicationError(f"Unknown or inactive verb {name!r}.", field=field, code="unknown_verb")
    return verb


def phrase_block_add(
    *, phrase: str, verb_name: str, user_id: str | None = None, reason: str = "", expires_at=None, source: str = "api"
) -> PhraseBlock:
    """Block ``verb`` for ``phrase`` and its paraphrases, globally or for one user, until ``expires_at`` (or forever)."""
    normalized = normalize_phrase(phrase)
    if not normalized:
        raise ApplicationError("The phrase is empty.", field="phrase")
    verb = _verb_by_name(verb_name, field="verb")
    if expires_at is not None and expires_at <= timezone.now():
        raise ApplicationError("The expiry must lie in the future.", field="expires_in")
    vectors, model = embeddings_compute([normalized])
    with transaction.atomic():
        return _phrase_block_put(
            phrase=phrase, normalized=normalized, verb=verb, user_id=user_id, reason=reason, source=source,
            expires_at=expires_at, vectors=vectors, model=model,
        )


def _phrase_block_locked(block_id: int) -> PhraseBlock:
    block = PhraseBlock.objects.select_for_update().filter(pk=block_id).first()
    if block is None:
        raise NotFound(f"No blocklist entry {block_id}.", field="id")
    return block


def phrase_block_expire(*, block_id: int, reviewer=None, agent=None) -> PhraseBlock:
    """End a block now; the entry stays (expired) for the audit trail until purged."""
    with transaction.atomic():
        block = _phrase_block_locked(block_id)
        now = timezone.now()
        if block.expires_at is None or block.expires_at > now:
            block.expires_at = now
            block._history_user = reviewer
            if agent is not None:
                block._change_reason = f"expired via API, agent {agent.name}"
            block.save()
    return block


def phrase_block_delete(*, block_id: int, reviewer=None, agent=None) -> None:
    """Remove a block (its history keeps the deletion)."""
    with transaction.atomic():
        block = _phrase_block_locked(block_id)
        block._history_user = reviewer
        if agent is not None:
            block._change_reason = f"deleted via API, agent {agent.name}"
        block.delete()


def phrase_blocks_purge_expired() -> int:
    """Delete every expired block; answers how many went."""
    with transaction.atomic():
        deleted, _ = PhraseBlock.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted


def phrase_correction_apply(*, text: str, wrong_verb: str, correct_verb: str, user_id: str | None) -> dict:
    """Learn from "``text`` meant ``correct_verb``, not ``wrong_verb``".

    With a user: the user's own phrase row for the text holds the correct verb afterwards (created at
    START + BOOST, re-pointed from another verb likewise, or boosted by BOOST up to CAP when it already
    holds it); the user's learned phrases for ``wrong_verb`` that the text matched (exact row before
    re-pointing, and semantic anchors within the learned threshold) decay ×DECAY down to FLOOR.
    Without a user (global data): occurrence counts move: the global row gains one when it holds the
    correct verb, loses one (down to 0) when it holds the wrong one; a missing or wrong global mapping
    becomes a pending LearningCandidate for reviewers. Global rows are never touched for a user.
    """
    normalized = normalize_phrase(text)
    if not normalized:
        raise ApplicationError("The text is empty.", field="text")
    if wrong_verb == correct_verb:
        raise ApplicationError("The wrong and the correct verb are the same.", field="correct_verb")
    wrong = _verb_by_name(wrong_verb, field="wrong_verb")
    correct = _verb_by_name(correct_verb, field="correct_verb")
    from learning.selectors import active_blocks

    if active_blocks(user_id=user_id).filter(normalized=normalized, verb=correct).exists():
        raise Conflict(f"A blocklist entry forbids {text!r} → {correct.name}.", field="correct_verb", code="blocked")
    if user_id is None:
        return _correction_global(text=text, normalized=normalized, wrong=wrong, correct=correct)
    return _correction_user(text=text, normalized=normalized, wrong=wrong, correct=correct, user_id=user_id)


def _correction_user(*, text: str, normalized: str, wrong: Verb, correct: Verb, user_id: str) -> dict:
    from learning.resolution import profile
    from learning.selectors import correction_decay_targets

    vectors, model = embeddings_compute([normalized])
    s = settings
    anchors = []
    if vectors is not None:
        anchors = correction_decay_targets(
            vector=vectors[0], model=model, user_id=user_id, verb=wrong, exclude_normalized=normalized,
            threshold=profile(model)["correction_decay_threshold"],
        )
    decay = Greatest(Value(s.LEARNING_CORRECTION_FLOOR), F("confidence") * Value(s.LEARNING_CORRECTION_DECAY))
    fresh = min(s.LEARNING_CORRECTION_CAP, s.LEARNING_CORRECTION_START + s.LEARNING_CORRECTION_BOOST)
    with transaction.atomic():
        row, created = _user_phrase_lock_or_create(
            text=text, normalized=normalized, verb=correct, user_id=user_id, confidence=fresh, vectors=vectors, model=model
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
                    LearnedPhrase.history.bulk_history_create([row], update=True, default_change_reason="correction: wrong mapping decayed")
                qs.update(verb=correct, confidence=Value(fresh), occurrence_count=1, is_active=True, source="correction", updated_at=timezone.now())
        if decayed_ids:
            locked = list(
                LearnedPhrase.objects.select_for_update().filter(pk__in=decayed_ids, user_id=user_id, verb=wrong).order_by("pk").values_list("pk", flat=True)
            )
            LearnedPhrase.objects.filter(pk__in=locked).update(confidence=decay, updated_at=timezone.now())
            decayed_ids = locked
        touched = list(LearnedPhrase.objects.filter(pk__in=[row.pk, *decayed_ids]).select_related("verb").order_by("pk"))
        if touched and not created:
            LearnedPhrase.history.bulk_history_create(touched, update=True, default_change_reason="correction")
        elif len(touched) > 1:
            LearnedPhrase.history.bulk_history_create([t for t in touched if t.pk != row.pk], update=True, default_change_reason="correction")
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


def _user_phrase_lock_or_create(
    *, text, normalized, verb, user_id, confidence, vectors, model, source: str = "correction"
) -> tuple[LearnedPhrase, bool]:
    """Lock the user's row for the phrase, creating it (race-safe) when absent."""
    for _attempt in range(3):
        row = LearnedPhrase.objects.select_for_update().filter(normalized=normalized, user_id=user_id).first()
        if row is not None:
            return row, False
        try:
            with transaction.atomic():
                row = LearnedPhrase(
                    phrase=text.strip(), normalized=normalized, verb=verb, user_id=user_id, confidence=confidence,
                    source=source,
                )
                embedding_assign([row], vectors, model)
                row.save()
                return row, True
        except IntegrityError:
            continue  # created by a concurrent correction: lock that one
    raise Conflict("The phrase changed meanwhile; retry.", field="text")


def phrase_confirmation_apply(*, text: str, verb: str, user_id: str) -> dict:
    """Learn from "the user accepted ``verb`` for ``text``" (the agent ran it and the user did not correct it).

    The user's own phrase row for the text holds the verb afterwards: created at
    LEARNING_CONFIRMATION_CONFIDENCE, or, when it already holds the verb, counted once more and raised
    by LEARNING_CONFIRMATION_BOOST up to LEARNING_CORRECTION_CAP. A confirmation never overrides what
    a correction, a click or a reviewer decided: a row holding another verb, or switched off, answers
    409 and stays as it is. Global rows are never touched (they change through review only).
    """
    normalized = normalize_phrase(text)
    if not normalized:
        raise ApplicationError("The text is empty.", field="text")
    if not user_id:
        raise ApplicationError("A confirmation needs the user_id of the user who accepted the verb.", field="user_id")
    target = _verb_by_name(verb, field="verb")
    from learning.selectors import active_blocks

    if active_blocks(user_id=user_id).filter(normalized=normalized, verb=target).exists():
        raise Conflict(f"A blocklist entry forbids {text!r} → {target.name}.", field="verb", code="blocked")
    vectors, model = embeddings_compute([normalized])
    s = settings
    with transaction.atomic():
        row, created = _user_phrase_lock_or_create(
            text=text, normalized=normalized, verb=target, user_id=user_id, confidence=s.LEARNING_CONFIRMATION_CONFIDENCE,
            vectors=vectors, model=model, source="confirmation",
        )
        if not created:
            if row.verb_id != target.pk:
                raise Conflict(
                    f"The user's phrase {row.phrase!r} maps to {row.verb.name}; send a correction to change it.",
                    field="verb", code="conflicting_phrase",
                )
            if not row.is_active:
                raise Conflict(f"The user's phrase {row.phrase!r} was switched off; a confirmation does not restore it.",
                               field="text", code="inactive_phrase")
            LearnedPhrase.objects.filter(pk=row.pk).update(
                confidence=Least(Value(s.LEARNING_CORRECTION_CAP), F("confidence") + Value(s.LEARNING_CONFIRMATION_BOOST)),
                occurrence_count=F("occurrence_count") + 1,
                updated_at=timezone.now(),
            )
            row.refresh_from_db()
            LearnedPhrase.history.bulk_history_create([row], update=True, default_change_reason="confirmation")
        _positive_evidence_add(user_id=user_id, text=text, verb=target, vectors=vectors, model=model,
                               weight=s.LEARNING_CONFIRMATION_CONFIDENCE)
    return {"user_id": user_id, "phrase": _phrase_state(row), "created": created}


def _positive_evidence_add(*, user_id: str, text: str, verb: Verb, vectors, model: str, weight: float) -> None:
    """The user accepted ``verb`` for ``text``: positive feedback evidence, which offsets the negative evidence of
    options this user passed over for similar phrases (feedback.selectors.verb_evidence_balance)."""
    from feedback.services import phrase_evidence_add

    phrase_evidence_add(user_id=user_id, phrase=text, verb=verb.name, positive=weight,
                        vector=vectors[0] if vectors is not None else None, model=model)


def _correction_global(*, text: str, normalized: str, wrong: Verb, correct: Verb) -> dict:
    candidate = None
    with transaction.atomic():
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
                input_pattern=text, suggested_output=correct.name, user_id=None, source="correction",
                confidence=settings.LEARNING_CORRECTION_CANDIDATE_CONFIDENCE, previous_output=wrong.name,
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


class ImportRejected(ApplicationError):
    """An import with invalid rows: nothing was written; ``extra["errors"]`` names every bad row."""

    code = "import_invalid"


def _import_error(errors: list, row, field: str, reason: str) -> None:
    errors.append({"row": row.number, "field": field, "reason": reason})


def phrases_import(
    *, rows: list, user_id: str | None = None, dry_run: bool = False, progress: bool = False, source: str = "import"
) -> dict:
    """Import ``ImportRow``s as learned phrases of one scope: all valid rows in one transaction, or nothing.

    Rows are checked first (empty phrase or verb, unknown verb, one phrase mapped to two verbs, a mapping an
    active blocklist entry forbids exactly or by paraphrase). A dry run reports what would change and writes
    nothing. Vectors are computed in batches (``progress`` shows a tqdm bar) before the transaction opens.
    """
    import numpy as np
    from simple_history.utils import bulk_create_with_history, bulk_update_with_history
    from tqdm import tqdm

    from learning import selectors
    from learning.resolution import profile

    errors: list[dict] = []
    verbs = {v.name: v for v in Verb.objects.filter(name__in={r.verb for r in rows if r.verb}, is_active=True)}
    plan: dict[str, tuple] = {}  # normalized -> (row, verb)
    duplicates = 0
    for row in rows:
        normalized = normalize_phrase(row.phrase)
        if not normalized:
            _import_error(errors, row, "phrase", "The phrase is empty.")
            continue
        if len(row.phrase) > 500:
            _import_error(errors, row, "phrase", "The phrase is longer than 500 characters.")
            continue
        if not row.verb:
            _import_error(errors, row, "verb", "The verb is empty.")
            continue
        if row.verb not in verbs:
            _import_error(errors, row, "verb", f"Unknown or inactive verb {row.verb!r}.")
            continue
        if normalized in plan:
            first, verb = plan[normalized]
            if verb.name != row.verb:
                _import_error(
                    errors, row, "verb",
                    f"{row.phrase!r} is mapped to {row.verb} here and to {verb.name} in row {first.number}.",
                )
            else:
                duplicates += 1
            continue
        plan[normalized] = (row, verbs[row.verb])

    blocks = list(
        selectors.active_blocks(user_id=user_id).filter(verb__name__in=list(verbs)).values_list("pk", "normalized", "verb__name", "embedding", "embedding_model")
    )
    exact_blocks = {(n, v): pk for pk, n, v, _, _ in blocks}
    for normalized, (row, verb) in plan.items():
        if (normalized, verb.name) in exact_blocks:
            _import_error(errors, row, "verb", f"Blocklist entry {exact_blocks[(normalized, verb.name)]} forbids {row.phrase!r} → {verb.name}.")
    exactly_blocked = {n for n, (_, verb) in plan.items() if (n, verb.name) in exact_blocks}

    existing = selectors.import_existing(normalized=list(plan), user_id=user_id)
    added, updated, unchanged = [], [], []
    for normalized, (row, verb) in plan.items():
        current = existing.get(normalized)
        if current is None:
            added.append(normalized)
        elif current.verb_id == verb.pk and current.is_active and current.embedding_model:
            unchanged.append(normalized)
        else:
            updated.append(normalized)

    # Vectors: for rows to write (not in a dry run) and for rows whose verb has semantic blocks to check.
    blocked_verbs = {v for _, _, v, e, _ in blocks if e is not None}
    need_check = [n for n in plan if plan[n][1].name in blocked_verbs and n not in unchanged and n not in exactly_blocked]
    to_write = [] if dry_run or errors else [n for n in added + updated if n not in existing or not existing[n].embedding_model]
    # Sorted by length so each model batch pads to similar lengths (much less wasted compute on long tails).
    to_embed = sorted(dict.fromkeys(need_check + to_write), key=len)
    vectors: dict[str, list] = {}
    model, unembedded = "", 0
    batch = settings.LEARNING_IMPORT_BATCH_SIZE
    with tqdm(total=len(to_embed), desc="embedding", unit="phrase", disable=not progress or not to_embed) as bar:
        for start in range(0, len(to_embed), batch):
            chunk = to_embed[start : start + batch]
            out, model_name = embeddings_compute(chunk)
            if out is None:
                unembedded += len(chunk)
            else:
                model = model_name
                vectors.update(zip(chunk, out))
            bar.update(len(chunk))

    if need_check and vectors:
        threshold = profile(model or None)["blocklist_threshold"]
        for verb_name in blocked_verbs:
            block_rows = [(pk, np.asarray(e, dtype=np.float32)) for pk, _, v, e, m in blocks if v == verb_name and e is not None and m == model]
            texts = [n for n in need_check if plan[n][1].name == verb_name and n in vectors]
            if not block_rows or not texts:
                continue
            bm = np.stack([e / (np.linalg.norm(e) or 1.0) for _, e in block_rows])
            tm = np.stack([np.asarray(vectors[n], dtype=np.float32) for n in texts])
            tm = tm / np.maximum(np.linalg.norm(tm, axis=1, keepdims=True), 1e-12)
            sims = tm @ bm.T
            for i, n in enumerate(texts):
                j = int(np.argmax(sims[i]))
                if sims[i, j] >= threshold:
                    row = plan[n][0]
                    _import_error(errors, row, "verb", f"Blocklist entry {block_rows[j][0]} forbids {row.phrase!r} → {verb_name} (a paraphrase of a blocked phrase).")
    if errors:
        errors.sort(key=lambda e: e["row"])
        _import_reject(errors)

    result = {
        "dry_run": dry_run,
        "scope": "user" if user_id else "global",
        "user_id": user_id,
        "rows": len(rows),
        "imported": len(added),
        "updated": len(updated),
        "unchanged": len(unchanged) + duplicates,
        "rejected": 0,
        "unembedded": 0,
        "errors": [],
    }
    if dry_run:
        result["would_add"] = [plan[n][0].phrase for n in added[:100]]
        result["would_update"] = [plan[n][0].phrase for n in updated[:100]]
        return result

    now = timezone.now()
    with transaction.atomic():
        new_rows = []
        for n in added:
            row, verb = plan[n]
            obj = LearnedPhrase(
                phrase=row.phrase, normalized=n, verb=verb, user_id=user_id, source=source, confidence=1.0,
                created_at=now, updated_at=now,
            )
            if n in vectors:
                embedding_assign([obj], [vectors[n]], model)
            new_rows.append(obj)
        bulk_create_with_history(new_rows, LearnedPhrase, batch_size=1000, default_change_reason=f"import ({source})")
        if updated:
            locked = {r.normalized: r for r in LearnedPhrase.objects.select_for_update().filter(pk__in=[existing[n].pk for n in updated])}
            changed = []
            for n in updated:
                obj = locked[n]
                row, verb = plan[n]
                obj.phrase, obj.verb, obj.source, obj.confidence, obj.is_active, obj.updated_at = row.phrase, verb, source, 1.0, True, now
                if n in vectors:
                    embedding_assign([obj], [vectors[n]], model)
                changed.append(obj)
            bulk_update_with_history(
                changed, LearnedPhrase,
                ["phrase", "verb", "source", "confidence", "is_active", "updated_at", "embedding", "embedding_model", "embedding_hash"],
                batch_size=1000, default_change_reason=f"import ({source})",
            )
    result["unembedded"] = sum(1 for n in added + updated if n not in vectors and not (existing.get(n) and existing[n].embedding_model))
    return result


def _import_reject(errors: list[dict]) -> None:
    first = errors[0]
    raise ImportRejected(
        f"{len(errors)} invalid row(s); nothing was imported. Row {first['row']}: {first['reason']}",
        field="content",
        extra={"errors": errors[:1000], "rejected": len(errors), "imported": 0, "updated": 0, "unchanged": 0},
    )


# --- Embedding backfill (foundation) -------------------------------------------


def embeddings_backfill(*, batch_size: int = 128, progress=None) -> dict:
    """Embed every row whose vector is missing or stale, one committed batch at a time (resumable).

    ``progress(model, total)`` may return a callable ``update(n)`` for a progress bar.
    Answers {"embedded": n, "failed": n, "model": name}; raises EmbeddingError if the embedder cannot load.
    """
    from learning.selectors import EMBEDDED_MODELS, embedding_rows_needing_work

    model_name = get_embedder().model_name
    totals = {"embedded": 0, "failed": 0, "model": model_name}
    for model in EMBEDDED_MODELS:
        pending = embedding_rows_needing_work(model, current_model=model_name)
        total = pending.count()
        if not total:
            continue
        update = progress(model, total) if progress else None
        last_pk = 0
        while True:
            rows = list(pending.filter(pk__gt=last_pk)[:batch_size])
            if not rows:
                break
            last_pk = rows[-1].pk
            try:
                done = embeddings_refresh(rows=rows)
            except Exception:  # count and go on: one bad batch must not stop the rest
                logger.exception("embedding batch of %s after pk %s failed", model.__name__, last_pk)
                done = 0
            totals["embedded"] += done
            totals["failed"] += len(rows) - done
            if update:
                update(len(rows))
    return totals
