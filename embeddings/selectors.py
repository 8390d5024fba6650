"""Reads for embeddings: rows whose vector is missing or stale, and nearest neighbours that never come back short."""

import logging
import time
from collections.abc import Callable

from django.apps import apps
from django.conf import settings
from django.db.models import CharField, ExpressionWrapper, FloatField, Func, Q, QuerySet, Value
from pgvector.django import CosineDistance

from embeddings.models import Embedded, EmbeddingStale
from tenants.context import tenant_filter_ids

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
    """Every installed model whose rows carry a vector (subclasses of ``Embedded``), in the backfill's order
    (``backfill_order``, then the label)."""
    return sorted((m for m in apps.get_models() if issubclass(m, Embedded)), key=lambda m: (m.backfill_order, m._meta.label))


def nearest(
    qs: QuerySet, vector, k: int, *, project: Callable[[QuerySet], QuerySet] = lambda q: q, small: bool | None = None
) -> list:
    """The ``k`` rows of ``qs`` nearest to ``vector`` by cosine distance (annotated ``distance``), best first.

    A scope of at most ``NEAREST_EXACT_MAX_ROWS`` rows (counted first, up to one row more) is scanned exactly: HNSW
    is approximate, and a graph crowded with identical vectors (many users who learned the same phrase) can hand a
    small filtered scope rows that are not its nearest. A larger scope asks the HNSW index first; when that returns
    fewer than ``k`` rows, the filtered rows are scanned exactly, since a crowded graph (or rows of rolled-back
    transactions not yet vacuumed) can leave a filtered index scan short even with iterative scans, and a short
    answer would silently drop neighbours. ``project`` shapes the rows (``values_list`` and the like). ``small``:
    the caller's own answer to "at most NEAREST_EXACT_MAX_ROWS rows?" (``scope_is_small`` over a scope holding
    ``qs``), so several searches of one scope count it once; None counts ``qs`` here.
    """
    # "+ 0" keeps the planner off the index: the ordering is no longer the indexed operator.
    exact_distance = ExpressionWrapper(CosineDistance("embedding", vector) + Value(0.0), output_field=FloatField())
    if small if small is not None else scope_is_small(qs):
        return list(project(qs.annotate(distance=exact_distance).order_by("distance"))[:k])
    ordered = qs.annotate(distance=CosineDistance("embedding", vector)).order_by("distance")
    rows = list(project(ordered)[:k])
    if len(rows) >= k:
        return _by_distance(rows)
    exact = list(project(qs.annotate(distance=exact_distance).order_by("distance"))[:k])
    if len(exact) > len(rows):
        logger.info("%s: index scan found %d of %d neighbours, exact scan %d", qs.model._meta.label, len(rows), k, len(exact))
    return exact


def scope_is_small(qs: QuerySet) -> bool:
    """Whether ``qs`` holds at most ``NEAREST_EXACT_MAX_ROWS`` rows (counted up to one row more): ``nearest`` then
    scans it exactly."""
    upto = settings.NEAREST_EXACT_MAX_ROWS
    return upto > 0 and qs.order_by().values("pk")[: upto + 1].count() <= upto


def _by_distance(rows: list) -> list:
    """The rows best first: an HNSW scan with iterative scans in relaxed order (``hnsw.iterative_scan``) may answer
    its k rows slightly out of order (pgvector). Rows are model instances or dicts with their ``distance``."""
    return sorted(rows, key=lambda r: r["distance"] if isinstance(r, dict) else getattr(r, "distance", 0.0))


# How long a process trusts its answer to "are vectors of another model left?" (one index probe per table when it
# asks again): a change of model is re-embedded by the backfill over minutes or hours, never in a second.
OTHER_MODEL_CHECK_S = 5.0
_other_model_seen: dict[tuple, tuple[float, bool]] = {}


def other_model_rows_left(models, *, current_model: str, fresh: bool = False) -> bool:
    """Whether rows of ``models`` in the caller's scope still carry a vector of another embedding model (after a
    change of model, until the backfill has embedded them again): those rows are not compared with a query of
    ``current_model``, which should say so. Per process, kept ``OTHER_MODEL_CHECK_S`` (``fresh``: asked again now);
    the probes read the ``<table>_emb_model`` index, either side of the current model."""
    key = (tuple(m._meta.label for m in models), current_model, tenant_filter_ids())
    now = time.monotonic()
    seen = _other_model_seen.get(key)
    if seen is not None and not fresh and now - seen[0] < OTHER_MODEL_CHECK_S:
        return seen[1]
    # either side of the current model, past the rows without one ("": waiting for their first vector)
    other = Q(embedding_model__gt="", embedding_model__lt=current_model) | Q(embedding_model__gt=current_model)
    left = any(m.objects.filter(other).exists() for m in models)
    if len(_other_model_seen) > 1000:
        _other_model_seen.clear()
    _other_model_seen[key] = (now, left)
    return left


def other_model_rows_forget() -> None:
    """Forget what ``other_model_rows_left`` saw (tests; a process that changed its model)."""
    _other_model_seen.clear()
