"""Reads of entity aliases and the verb catalogue for agents."""

from collections import defaultdict

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from common.text import normalize_phrase
from embeddings.embedders import embed_query
from embeddings.selectors import nearest, other_model_rows_left
from learning.models import (
    EntityAlias,
    Verb,
    VerbPhrase,
)
from learning.selectors.tiers import scope_q

ALIAS_SEMANTIC_THRESHOLDS = {"default": 0.85, "all-MiniLM-L6-v2-onnx-int8": 0.80}
ALIASES_REEMBEDDING = "re-embedding: some aliases still carry another embedding model's vectors and were not compared"


def _alias_match(row: EntityAlias, score: float, match: str) -> dict:
    return {
        "alias": row.alias,
        "canonical_name": row.canonical_name,
        "entity_type": row.entity_type,
        "scope": "user" if row.user_id else "global",
        "user_id": row.user_id,
        "confidence": row.confidence,
        "score": round(float(score), 4),
        "match": match,
    }


def entity_alias_resolve(*, text: str, user_id: str | None = None, entity_type: str | None = None, limit: int = 5) -> dict:
    """What ``text`` names: active aliases spelled the same (normalized), else the nearest ones by vector
    (pgvector, at or above the model's ALIAS_SEMANTIC_THRESHOLDS). A user's alias shadows a global one for
    the same name and entity type. Without a vector (embedder down) only exact matches answer (``degraded``); after a
    change of embedding model, aliases not embedded again yet are not compared, and the answer says so (``degraded``)."""
    normalized = normalize_phrase(text)
    rows = EntityAlias.objects.filter(scope_q(user_id), is_active=True)
    if entity_type:
        rows = rows.filter(entity_type=entity_type)
    exact = sorted(rows.filter(normalized=normalized), key=lambda r: (r.user_id is None, r.pk))
    reason, match = "", "exact"
    hits = [(r, 1.0) for r in exact]
    if not hits:
        match = "semantic"
        vector, model, reason = embed_query(normalized)
        if vector is not None:
            threshold = ALIAS_SEMANTIC_THRESHOLDS.get(model, ALIAS_SEMANTIC_THRESHOLDS["default"])
            near = nearest(rows.filter(embedding_model=model), vector, max(limit * 4, 20))
            hits = sorted(((r, 1.0 - r.distance) for r in near), key=lambda h: (-round(h[1], 4), h[0].user_id is None, h[0].pk))
            hits = [(r, s) for r, s in hits if s >= threshold]
            if other_model_rows_left([EntityAlias], current_model=model):
                reason = ALIASES_REEMBEDDING
    seen_names: set[tuple[str, str]] = set()
    seen_answers: set[tuple[str, str]] = set()
    matches = []
    for row, score in hits:
        name, answer = (row.normalized, row.entity_type), (row.canonical_name, row.entity_type)
        if name in seen_names or answer in seen_answers:  # shadowed by the user's own alias, or the same answer again
            continue
        seen_names.add(name)
        seen_answers.add(answer)
        matches.append(_alias_match(row, score, match))
    matches = matches[:limit]
    return {
        "text": text,
        "normalized": normalized,
        "outcome": match if matches else "no_match",
        "canonical_name": matches[0]["canonical_name"] if matches else None,
        "entity_type": matches[0]["entity_type"] if matches else None,
        "matches": matches,
        "degraded": bool(reason),
        "degraded_reason": reason,
    }


def verb_catalogue(*, examples: int = 3, limit: int | None = None, offset: int = 0) -> list[dict]:
    """The active verbs, by domain and name, with display names, descriptions and a few example phrases
    (``limit`` verbs after ``offset``; all without a limit). Only the examples shown are read."""
    qs = Verb.objects.filter(is_active=True).order_by("domain", "name", "id")
    verbs = list(qs[offset : offset + limit] if limit is not None else qs[offset:])
    ranked = (
        VerbPhrase.objects.filter(verb__in=[v.pk for v in verbs])
        .annotate(rank=Window(RowNumber(), partition_by=[F("verb_id")], order_by=[F("id").asc()]))
        .filter(rank__lte=examples)
        .order_by("verb_id", "id")
        .values_list("verb_id", "text")
    )
    phrases: dict[int, list[str]] = defaultdict(list)
    for verb_id, text in ranked if verbs and examples > 0 else ():
        phrases[verb_id].append(text)
    return [
        {"name": v.name, "domain": v.domain, "display_name": v.label, "description": v.description, "examples": phrases[v.pk]}
        for v in verbs
    ]


def verb_count() -> int:
    """How many verbs are active."""
    return Verb.objects.filter(is_active=True).count()
