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
