"""Writes of learned phrases: upserts. Each service is one transaction."""

import logging

from django.db import IntegrityError, connection, transaction

from common.api import ApplicationError, Conflict, NotFound
from common.db import tenant_lock
from common.text import normalize_phrase
from embeddings.services import embedding_assign, embeddings_compute
from learning.models import LearnedPhrase, Verb
from learning.selectors.owners import phrase_owner
from tenants.context import acting_agent_id

logger = logging.getLogger(__name__)

# The source of a learned phrase that a learning candidate (a click, its variants, a reviewer's approval) taught.
LEARNED_SOURCE = "candidate"

# The longest phrase a learned phrase (or a block, or a candidate) holds, as typed and normalised.
PHRASE_TEXT_MAX = LearnedPhrase._meta.get_field("normalized").max_length


def _phrase_length_check(text: str, normalized: str, *, field: str) -> None:
    """400 naming ``field`` when the phrase is longer than a learned phrase holds, as typed or once normalised
    (NFKC and casefolding can lengthen it: "ß" becomes "ss")."""
    if len(text.strip()) > PHRASE_TEXT_MAX or len(normalized) > PHRASE_TEXT_MAX:
        raise ApplicationError(
            f"The {field} is too long once normalised (at most {PHRASE_TEXT_MAX} characters).",
            field=field,
            code="too_long",
        )


def learned_phrase_upsert(
    *, phrase: str, verb: Verb, user_id: str | None = None, source: str = "manual", confidence: float = 1.0
) -> LearnedPhrase:
    """Teach ``phrase`` → ``verb`` for the user (or globally). A phrase already mapped in that scope is re-pointed."""
    normalized = normalize_phrase(phrase)
    vectors, model = embeddings_compute(texts=[normalized])
    with transaction.atomic():
        row, created = LearnedPhrase.objects.select_for_update().get_or_create(
            normalized=normalized,
            user_id=user_id,
            private_agent_id=phrase_owner(user_id),
            defaults={"phrase": phrase.strip(), "verb": verb, "source": source, "confidence": confidence},
        )
        if not created:
            row.verb = verb
            row.phrase = phrase.strip()
            row.source = source
            row.confidence = confidence
            row.is_active = True
        embedding_assign(rows=[row], vectors=vectors, model=model)
        row.save()
    return row


def phrase_text_lock(*, normalized: str) -> None:
    """Inside a transaction: wait for, then hold until its end, the tenant's lock on one text. A writer that changes
    a candidate and a learned phrase or evidence of the text (an approval, a correction, a click's learning) takes
    it first, so two of them run one after the other whatever rows each would lock, and in whichever order (a
    candidate that appears meanwhile included). A writer of several texts takes them with ``phrase_texts_lock``."""
    phrase_texts_lock(texts=[normalized])


def phrase_texts_lock(*, texts) -> None:
    """``phrase_text_lock`` for several texts in one statement, in one order (Python's sort of the texts, not the
    database's collation), so two writers of overlapping texts never wait on each other in a cycle."""
    texts = sorted(set(texts))
    if not texts:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('learning:text:' || coalesce(tenants_current_id()::text, '')"
            " || ':' || t, 0)) FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n",
            [texts],
        )


def user_learning_lock(*, user_id: str, exclusive: bool = False) -> None:
    """Inside a transaction: hold the tenant's lock on one user's learning until its end. A writer that adds several
    rows of the user (a confirmation, a correction, an import into the user's scope) takes it shared, first; the
    erasure of the user (``user_learning_erase``) takes it ``exclusive``, first: it waits for the writers running,
    whose rows it then sees, and the writers after it wait for it. Writers never wait on each other."""
    tenant_lock("learning:user:", user_id, shared=not exclusive)


_AS_REQUEST = object()  # history_user not given: django-simple-history records the request's user, if any


def learned_phrase_lock_or_create(
    *,
    phrase: str,
    normalized: str,
    verb: Verb,
    user_id: str | None,
    owner: int | None,
    source: str,
    confidence: float,
    vectors: list | None,
    model: str,
    occurrence_count: int = 1,
    history_user=_AS_REQUEST,
    field: str = "text",
) -> tuple[LearnedPhrase, bool]:
    """Inside a transaction: lock the phrase's row in its scope (a user's phrase: of ``owner``, the agent with private
    user data it belongs to, else shared), creating it with ``verb`` when absent. Race-safe: a row a concurrent writer
    inserted meanwhile is locked instead. Answers (row, created); 409 naming ``field`` when the row keeps changing."""
    owner = owner if user_id else None
    for _attempt in range(3):
        row = (
            LearnedPhrase.objects.select_for_update()
            .filter(normalized=normalized, user_id=user_id, private_agent_id=owner)
            .first()
        )
        if row is not None:
            return row, False
        try:
            with transaction.atomic():  # a savepoint: a unique violation leaves the outer transaction usable
                row = LearnedPhrase(
                    phrase=phrase.strip(),
                    normalized=normalized,
                    verb=verb,
                    user_id=user_id,
                    private_agent_id=owner,
                    occurrence_count=occurrence_count,
                    agent_id=acting_agent_id(),
                    source=source,
                    confidence=confidence,
                    is_active=True,
                )
                embedding_assign(rows=[row], vectors=vectors, model=model)
                if history_user is not _AS_REQUEST:
                    row._history_user = history_user
                row.save()
            return row, True
        except IntegrityError:
            continue
    raise Conflict("The phrase changed meanwhile; retry.", field=field)


def _learned_phrase_put(
    *,
    phrase: str,
    normalized: str,
    verb: Verb,
    user_id: str | None,
    source: str,
    confidence: float,
    vectors: list | None,
    model: str,
    occurrence_count: int = 1,
    history_user=None,
    owner: int | None = None,
    keep_explicit: bool = False,
) -> tuple[LearnedPhrase, str]:
    """Inside a transaction: create or re-point the phrase in its scope (see ``learned_phrase_lock_or_create``).
    Answers (row, "added"|"updated"|"unchanged").

    With ``keep_explicit`` (automatic promotion) an active row holding another verb that was taught on purpose (a
    correction, a confirmation, an import, a manual upsert: any source but ``candidate``) is not re-pointed: 409
    ``explicit_phrase``, and the caller leaves the decision to a reviewer; one holding the same verb is left as it is
    (its source and confidence are not replaced by the promotion's); a row a reviewer switched off stays off (409
    ``inactive_phrase``)."""
    row, created = learned_phrase_lock_or_create(
        phrase=phrase,
        normalized=normalized,
        verb=verb,
        user_id=user_id,
        owner=owner,
        source=source,
        confidence=confidence,
        vectors=vectors,
        model=model,
        occurrence_count=occurrence_count,
        history_user=history_user,
        field="input_pattern",
    )
    if created:
        return row, "added"
    if keep_explicit and not row.is_active:  # a reviewer switched it off: only a reviewer turns it on again
        raise Conflict(
            f"The phrase {row.phrase!r} was switched off by a reviewer; a reviewer decides whether it comes back.",
            field="suggested_output",
            code="inactive_phrase",
        )
    if keep_explicit and row.source != LEARNED_SOURCE:
        if row.verb_id == verb.pk:  # already taught on purpose: kept as taught (its source keeps it from re-pointing)
            return row, "unchanged"
        raise Conflict(
            f"The phrase {row.phrase!r} was taught to mean {row.verb.name} ({row.source}); a reviewer decides whether "
            f"{verb.name} replaces it.",
            field="suggested_output",
            code="explicit_phrase",
        )
    if row.verb_id == verb.pk and row.is_active and row.confidence == confidence and row.embedding is not None:
        return row, "unchanged"
    row.phrase, row.verb, row.source, row.confidence, row.is_active = phrase.strip(), verb, source, confidence, True
    embedding_assign(rows=[row], vectors=vectors, model=model)
    row._history_user = history_user
    row.save()
    return row, "updated"


def learned_phrase_deactivate(*, phrase_id: int, reviewer, reason: str) -> LearnedPhrase:
    """Revert a learned phrase: it stops resolving at once; the row and its history stay (with the reason)."""
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("Say why the phrase is reverted.", field="reason")
    with transaction.atomic():
        row = LearnedPhrase.objects.select_for_update().filter(pk=phrase_id).first()
        if row is None:
            raise NotFound(f"Learned phrase {phrase_id} not found.", field="id")
        if not row.is_active:
            raise Conflict(f"“{row.phrase}” is already inactive.", field="id", code="already_inactive")
        row.is_active = False
        row._history_user = reviewer
        row._change_reason = f"reverted: {reason}"[:100]
        row.save()
    logger.info("learned phrase %s (%r) reverted by %s: %s", row.pk, row.phrase, reviewer, reason)
    return row
