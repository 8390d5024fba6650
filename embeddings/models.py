"""The vector every semantically matched text carries, with the model and text hash that made it."""

from django.db import models
from pgvector.django import HnswIndex, VectorField

from embeddings.embedders import DIMENSION


class Embedded(models.Model):
    """A row whose text has a vector."""

    embedding = VectorField(dimensions=DIMENSION, null=True, blank=True)
    embedding_model = models.CharField(max_length=100, blank=True, default="")
    embedding_hash = models.CharField(max_length=64, blank=True, default="", help_text="SHA-256 of the embedded text")

    #: The field holding the text the vector is computed from.
    embedded_field = "normalized"

    class Meta:
        abstract = True

    @property
    def embedding_text(self) -> str:
        return getattr(self, self.embedded_field)

    @property
    def has_embedding(self) -> bool:
        return self.embedding is not None


def hnsw_index(name: str) -> HnswIndex:
    return HnswIndex(name=name, fields=["embedding"], m=16, ef_construction=64, opclasses=["vector_cosine_ops"])
