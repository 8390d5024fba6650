"""Reads for embeddings: rows whose vector is missing or stale, and nearest neighbours that never come back short."""

import logging
from collections.abc import Callable

from django.apps import apps
from django.db.models import CharField, ExpressionWrapper, FloatField, Func, Q, QuerySet, Value
from pgvector.django import CosineDistance

from embeddings.models import Embedded, EmbeddingStale

logger = logging.getLogger(__name__)


class Sha256Hex(Func):
    """PostgreSQL's built-in sha256 as hex (no pgcrypto needed)."""

    template = "ENCODE(SHA256(CONVERT_TO(%(expressions)s, 'UTF8')), 'hex')"
    output_field = CharField()


def embedding_rows_needing_work(model, *, current_model: str) -> QuerySet:
    """Rows whose vector is missing, made by another model, made from other text, or of zero norm (stored before
    the embedder refused such vectors: it has no direction, and its cosine distance to anything is NaN).

    Index lookups, not a hash of every row (``embedding_work_indexes``): all but the model is one SQL function a
    partial index holds, and another model is a range either side of the current one (``<>`` cannot use an index).
    """
    return model.objects.filter(
        Q(EmbeddingStale(model.embedded_field)) | Q(embedding_model__lt=current_model) | Q(embedding_model__gt=current_model)
    ).order_by("pk")


def embedded_models() -> list[type[Embedded]]:
    """Every installed model whose rows carry a vector (subclasses of ``Embedded``), in a stable order."""
    return sorted((m for m in apps.get_models() if issubclass(m, Embedded)), key=lambda m: m._meta.label)


def nearest(qs: QuerySet, vector, k: int, *, project: Callable[[QuerySet], QuerySet] = lambda q: q) -> list:
    """The ``k`` rows of ``qs`` nearest to ``vector`` by cosine distance (annotated ``distance``), best first.

    The HNSW index answers first. When it returns fewer than ``k`` rows, the filtered rows are scanned exactly: a
    graph crowded with identical vectors (many users who learned the same phrase, or rows of rolled-back
    transactions not yet vacuumed) can leave a filtered index scan short even with iterative scans, and a short
    answer would silently drop neighbours. ``project`` shapes the rows (``values_list`` and the like).
    """
    ordered = qs.annotate(distance=CosineDistance("embedding", vector)).order_by("distance")
    rows = list(project(ordered)[:k])
    if len(rows) >= k:
        return rows
    # "+ 0" keeps the planner off the index: the ordering is no longer the indexed operator.
    exact_distance = ExpressionWrapper(CosineDistance("embedding", vector) + Value(0.0), output_field=FloatField())
    exact = list(project(qs.annotate(distance=exact_distance).order_by("distance"))[:k])
    if len(exact) > len(rows):
        logger.info("%s: index scan found %d of %d neighbours, exact scan %d", qs.model._meta.label, len(rows), k, len(exact))
    return exact
