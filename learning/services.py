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
from django.db.models import Case, F, Q, Value, When  # noqa: E402
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


def candidate_approve(*, candidate: LearningCandidate, reviewer=None, apply_immediately: bool = True) -> LearningCandidate:
    """Approve a candidate; by default apply it at once (learned phrase or alias with its vector, status ``applied``)."""
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
        if reviewer is not None or row.reviewed_at is None:
            row.reviewed_by, row.reviewed_at = reviewer, timezone.now()
        row._history_user = reviewer
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
    *, candidate: LearningCandidate, reviewer=None, reason: str = "", add_to_blocklist: bool = False
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
        row.reviewed_by, row.reviewed_at = reviewer, timezone.now()
        row._history_user = reviewer
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
