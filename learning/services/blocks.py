"""Writes of the phrase blocklist."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from common.api import ApplicationError, Conflict, NotFound
from common.db import rows_delete_in_batches
from common.text import normalize_phrase
from embeddings.services import embedding_assign, embeddings_compute
from learning.models import PhraseBlock, Verb
from learning.resolution import profile
from learning.selectors import block_applying
from learning.services.phrases import _phrase_length_check


def phrase_block_create(
    *, phrase: str, verb: Verb, user_id: str | None = None, reason: str = "", source: str = "manual", expires_at=None
) -> PhraseBlock:
    """Block ``verb`` for ``phrase`` and its paraphrases (globally or for one user)."""
    normalized = normalize_phrase(phrase)
    vectors, model = embeddings_compute(texts=[normalized])
    with transaction.atomic():
        block, _ = PhraseBlock.objects.select_for_update().get_or_create(
            normalized=normalized,
            verb=verb,
            user_id=user_id,
            defaults={"phrase": phrase.strip(), "reason": reason, "source": source, "expires_at": expires_at},
        )
        block.reason, block.source, block.expires_at = reason, source, expires_at
        embedding_assign(rows=[block], vectors=vectors, model=model)
        block.save()
    return block


# --- Learning governance: candidates, blocklist, corrections ---


_RISK_ORDER = {"low": 0, "medium": 1, "high": 2}


def _phrase_block_put(
    *,
    phrase: str,
    normalized: str,
    verb: Verb,
    user_id: str | None,
    reason: str,
    source: str,
    expires_at,
    vectors,
    model: str,
    history_user=None,
) -> tuple[PhraseBlock, bool]:
    """Inside a transaction: create or refresh the block of ``verb`` for the phrase in its scope; answers the block
    and whether it is new. A block still in force is never weakened by being added again: the later end wins (no end
    beats any), and it keeps its reason and source unless a reason is given. An ended one starts again as asked.
    Race-safe: a row another connection inserted meanwhile is locked and refreshed instead (the insert runs in a
    savepoint)."""
    now = timezone.now()
    for _attempt in range(3):
        block = PhraseBlock.objects.select_for_update().filter(normalized=normalized, verb=verb, user_id=user_id).first()
        fresh = block is None
        block = block or PhraseBlock(normalized=normalized, verb=verb, user_id=user_id)
        if not fresh and (block.expires_at is None or block.expires_at > now):
            if block.expires_at is not None and expires_at is not None:
                expires_at = max(block.expires_at, expires_at)
            else:
                expires_at = None
            source = source if reason else block.source
            reason = reason or block.reason
        block.phrase, block.reason, block.source, block.expires_at = phrase.strip(), reason, source, expires_at
        embedding_assign(rows=[block], vectors=vectors, model=model)
        block._history_user = history_user
        if not fresh:
            block.save()
            return block, False
        try:
            with transaction.atomic():
                block.save()
            return block, True
        except IntegrityError:
            continue  # inserted by a concurrent request: lock and refresh that one
    raise Conflict("The block changed meanwhile; retry.", field="phrase")


def block_refusal_check(
    *,
    text: str,
    normalized: str,
    verb: Verb,
    user_id: str | None,
    vectors,
    model: str,
    field: str,
    hint: str = "",
    comparable_only: bool = False,
) -> None:
    """409 ``blocked`` naming ``field`` when a block in force forbids ``verb`` for the text or a paraphrase of it
    (as the resolver applies blocks); when the text cannot be compared with a block of the verb (no vector: the
    embedder is down; or the block has none of ``model``), it is refused too, saying so, unless ``comparable_only``
    (for a write that teaches nothing until a check of its own, such as a candidate's approval). ``hint`` ends the
    message of a block that applies."""
    vector = vectors[0] if vectors is not None else None
    threshold = profile(model or None)["blocklist_threshold"]
    block = block_applying(
        normalized=normalized,
        verb=verb,
        user_id=user_id,
        vector=vector,
        model=model,
        threshold=threshold,
        comparable_only=comparable_only,
    )
    if block is None:
        return
    if block.normalized == normalized:
        why = hint
    elif vector is None or block.embedding is None or block.embedding_model != model:
        why = f" (it could not be compared with the block on “{block.phrase}”: a vector is missing; retry later)"
    else:
        why = f" (a paraphrase of the blocked “{block.phrase}”){hint}"
    raise Conflict(f"A blocklist entry forbids {text!r} → {verb.name}{why}.", field=field, code="blocked")


def _verb_by_name(name: str, *, field: str, retired_too: bool = False) -> Verb:
    """The active verb of that name (400 ``unknown_verb`` naming ``field``); with ``retired_too`` a retired one
    answers as well (the verb a user says was wrong may have been retired since)."""
    verbs = Verb.objects.filter(name=name) if retired_too else Verb.objects.filter(name=name, is_active=True)
    verb = verbs.first()
    if verb is None:
        raise ApplicationError(f"Unknown or inactive verb {name!r}.", field=field, code="unknown_verb")
    return verb


def phrase_block_add(
    *, phrase: str, verb_name: str, user_id: str | None = None, reason: str = "", expires_at=None, source: str = "api"
) -> tuple[PhraseBlock, bool]:
    """Block ``verb`` for ``phrase`` and its paraphrases, globally or for one user, until ``expires_at`` (or forever);
    answers the block and whether it is new. Adding a block in force again never shortens it or drops its reason
    (``_phrase_block_put``): to end one sooner, expire it."""
    normalized = normalize_phrase(phrase)
    if not normalized:
        raise ApplicationError("The phrase is empty.", field="phrase")
    _phrase_length_check(phrase, normalized, field="phrase")
    verb = _verb_by_name(verb_name, field="verb", retired_too=True)  # in force when it is switched back on
    if expires_at is not None and expires_at <= timezone.now():
        raise ApplicationError("The expiry must lie in the future.", field="expires_in")
    vectors, model = embeddings_compute(texts=[normalized])
    with transaction.atomic():
        return _phrase_block_put(
            phrase=phrase,
            normalized=normalized,
            verb=verb,
            user_id=user_id,
            reason=reason,
            source=source,
            expires_at=expires_at,
            vectors=vectors,
            model=model,
        )


def _phrase_block_locked(block_id: int) -> PhraseBlock:
    block = PhraseBlock.objects.select_for_update().filter(pk=block_id).first()
    if block is None:
        raise NotFound(f"No blocklist entry {block_id}.", field="id")
    return block


def phrase_block_expire(
    *, block_id: int, reviewer=None, agent=None, reason: str = "", must_be_active: bool = False
) -> PhraseBlock:
    """End a block now; the entry stays (expired) for the audit trail until purged. Ending an ended block changes
    nothing; with ``must_be_active`` (a revert, which must change something) it is a Conflict naming when it ended."""
    with transaction.atomic():
        block = _phrase_block_locked(block_id)
        now = timezone.now()
        if must_be_active and block.expires_at is not None and block.expires_at <= now:
            stamp = timezone.localtime(block.expires_at).strftime("%Y-%m-%d %H:%M")
            raise Conflict(f"The block “{block.phrase}” already ended at {stamp}.", field="id", code="already_inactive")
        if block.expires_at is None or block.expires_at > now:
            block.expires_at = now
            block._history_user = reviewer
            if agent is not None:
                block._change_reason = f"expired via API, agent {agent.name}"
            elif reason:
                block._change_reason = f"reverted: {reason}"[:100]
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
    """Delete every expired block (each deletion kept in its history), in batches that each commit on their own;
    answers how many went."""
    return rows_delete_in_batches(PhraseBlock.objects.filter(expires_at__lte=timezone.now()))
