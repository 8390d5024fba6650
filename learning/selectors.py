"""Reads for the learning app: catalogue, learned phrases, blocklist, vector searches.

Vector searches order by pgvector's cosine distance so the HNSW index is used;
connections run with ``hnsw.iterative_scan`` so user and domain filters never
starve a search of results.
"""

from dataclasses import dataclass

import numpy as np
from django.db.models import CharField, F, Func, Q, QuerySet
from django.utils import timezone
from pgvector.django import CosineDistance

from learning.models import EntityAlias, LearnedPhrase, PhraseBlock, Verb, VerbPhrase


@dataclass(frozen=True)
class Hit:
    verb: str
    similarity: float
    text: str
    user_id: str | None
    confidence: float = 1.0


def scope_q(user_id: str | None) -> Q:
    """Global rows, plus the user's own when a user is given."""
    return Q(user_id__isnull=True) | Q(user_id=user_id) if user_id else Q(user_id__isnull=True)


def verb_domains() -> list[str]:
    return list(Verb.objects.filter(is_active=True).values_list("domain", flat=True).distinct().order_by("domain"))


def domain_exists(domain: str) -> bool:
    return Verb.objects.filter(is_active=True, domain=domain).exists()


def _verb_filter(prefix: str, domain: str | None) -> Q:
    q = Q(**{f"{prefix}is_active": True})
    if domain:
        q &= Q(**{f"{prefix}domain": domain})
    return q


def learned_exact(*, normalized: str, user_id: str | None, domain: str | None) -> list[LearnedPhrase]:
    """Exact learned matches, the user's first, then global."""
    rows = list(
        LearnedPhrase.objects.filter(scope_q(user_id), _verb_filter("verb__", domain), normalized=normalized, is_active=True)
        .select_related("verb")
    )
    rows.sort(key=lambda r: r.user_id is None)
    return rows


def learned_nearest(*, vector: np.ndarray, model: str, user_id: str | None, domain: str | None, k: int) -> list[Hit]:
    rows = (
        LearnedPhrase.objects.filter(scope_q(user_id), _verb_filter("verb__", domain), is_active=True, embedding_model=model)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values_list("verb__name", "distance", "phrase", "user_id", "confidence")[:k]
    )
    return [Hit(v, 1.0 - d, t, u, c) for v, d, t, u, c in rows]


def catalogue_nearest(*, vector: np.ndarray, model: str, domain: str | None, k: int) -> list[Hit]:
    rows = (
        VerbPhrase.objects.filter(_verb_filter("verb__", domain), embedding_model=model)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values_list("verb__name", "distance", "text")[:k]
    )
    return [Hit(v, 1.0 - d, t, None) for v, d, t in rows]


def catalogue_phrase_matches(*, normalized: str, domain: str | None, min_length: int = 4) -> list[tuple[str, str, str]]:
    """Catalogue phrases equal to the text, contained in it, or containing it: (verb, phrase, kind)."""
    qs = VerbPhrase.objects.filter(_verb_filter("verb__", domain)).extra(
        where=["(%s LIKE '%%' || learning_verbphrase.normalized || '%%' OR learning_verbphrase.normalized LIKE %s)"],
        params=[normalized, f"%{normalized}%"],
    )
    out = []
    for verb, text, norm in qs.values_list("verb__name", "text", "normalized"):
        if norm == normalized:
            out.append((verb, text, "exact"))
        elif min(len(norm), len(normalized)) >= min_length:
            out.append((verb, text, "substring"))
    return out


def active_blocks(*, user_id: str | None) -> QuerySet[PhraseBlock]:
    now = timezone.now()
    return PhraseBlock.objects.filter(scope_q(user_id)).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def blocked_verbs(*, normalized: str, vector: np.ndarray | None, model: str, user_id: str | None, threshold: float, k: int = 50) -> set[str]:
    """Verbs blocked for this text: an exact blocked phrase, or one within ``threshold`` cosine."""
    blocks = active_blocks(user_id=user_id)
    verbs = set(blocks.filter(normalized=normalized).values_list("verb__name", flat=True))
    if vector is not None:
        near = (
            blocks.filter(embedding_model=model)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .values_list("verb__name", "distance")[:k]
        )
        verbs.update(v for v, d in near if 1.0 - d >= threshold)
    return verbs


def has_active_blocks(*, verb_names: list[str], user_id: str | None) -> bool:
    return active_blocks(user_id=user_id).filter(verb__name__in=verb_names).exists()


def verb_details(names: list[str]) -> dict[str, dict]:
    """Description, display name and one example phrase per verb, in two queries."""
    verbs = {v.name: v for v in Verb.objects.filter(name__in=names)}
    examples: dict[str, str] = {}
    for verb, text in VerbPhrase.objects.filter(verb__name__in=names).order_by("verb__name", "id").values_list("verb__name", "text"):
        examples.setdefault(verb, text)
    return {
        n: {"description": v.description, "display_name": v.label, "example": examples.get(n, "")}
        for n, v in verbs.items()
    }


class Sha256Hex(Func):
    """PostgreSQL's built-in sha256 as hex (no pgcrypto needed)."""

    template = "ENCODE(SHA256(CONVERT_TO(%(expressions)s, 'UTF8')), 'hex')"
    output_field = CharField()


def embedding_rows_needing_work(model, *, current_model: str) -> QuerySet:
    """Rows whose vector is missing, made by another model, or made from other text."""
    return (
        model.objects.annotate(current_hash=Sha256Hex(model.embedded_field))
        .filter(Q(embedding__isnull=True) | ~Q(embedding_model=current_model) | ~Q(embedding_hash=F("current_hash")))
        .order_by("pk")
    )


EMBEDDED_MODELS = [VerbPhrase, LearnedPhrase, EntityAlias, PhraseBlock]
