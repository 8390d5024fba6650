"""The vector every semantically matched text carries, with the model and text hash that made it."""

from django.db import models
from django.db.models import BooleanField, Func, Q
from pgvector.django import HnswIndex, VectorField

from embeddings.embedders import DIMENSION


class Embedded(models.Model):
    """A row whose text has a vector."""

    embedding = VectorField(dimensions=DIMENSION, null=True, blank=True)
    embedding_model = models.CharField(max_length=100, blank=True, default="")
    embedding_hash = models.CharField(max_length=64, blank=True, default="", help_text="SHA-256 of the embedded text")

    #: The field holding the text the vector is computed from.
    embedded_field = "normalized"
    #: Where the backfill takes this table among the others (lower first): after a change of model, a table whose
    #: rows not yet embedded again cost most comes first.
    backfill_order = 100

    class Meta:
        abstract = True

    @property
    def embedding_text(self) -> str:
        return getattr(self, self.embedded_field)

    @property
    def has_embedding(self) -> bool:
        return self.embedding is not None


def hnsw_index(name: str, condition=None) -> HnswIndex:
    return HnswIndex(
        name=name, fields=["embedding"], m=16, ef_construction=64, opclasses=["vector_cosine_ops"], condition=condition
    )


class EmbeddingStale(Func):
    """True when a row's vector is missing, has no direction, or was made from other text than the row's now: the
    SQL function ``embedding_stale`` (migration ``embeddings.0003``), immutable, so a partial index can hold it.

    Written ``IS TRUE`` so PostgreSQL estimates it from the expression's statistics (``EmbeddingStaleStatistics``),
    not a fixed third of the table: the backfill's batch query then reads the partial index, not every row."""

    function = "embedding_stale"
    template = "%(function)s(%(expressions)s) IS TRUE"
    output_field = BooleanField()

    def __init__(self, text_field: str, **extra):
        super().__init__("embedding", "embedding_hash", text_field, **extra)


def embedding_work_indexes(prefix: str, text_field: str = "normalized") -> list[models.Index]:
    """The two indexes that find an ``Embedded`` table's rows needing a vector without reading the others: the ids of
    stale rows (a partial index, empty while nothing is stale, kept by PostgreSQL on every write however made), and
    the model of each vector (rows of another model are a range scan either side of the current one)."""
    return [
        models.Index(fields=["id"], condition=Q(EmbeddingStale(text_field)), name=f"{prefix}_emb_stale"),
        models.Index(fields=["embedding_model"], name=f"{prefix}_emb_model"),
    ]
