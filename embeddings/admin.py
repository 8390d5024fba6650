"""Admin pieces shared by apps whose rows carry vectors."""

from django.contrib import admin

from common.text import text_hash
from embeddings.embedders import current_model_name


class EmbeddingStatusMixin:
    """Vectors are shown as model + embedded yes/no, never as numbers."""

    @admin.display(boolean=True, description="embedded")
    def embedded(self, obj):
        """A vector of the model the resolver embeds queries with: after a change of model, a row still carrying the
        old model's vector is not compared with anything (a block of it blocks its verb outright) until the backfill
        embeds it again, so it is not shown as embedded."""
        return obj.embedding is not None and obj.embedding_model == current_model_name()

    @admin.display(boolean=True, description="current")
    def embedding_current(self, obj):

        return (
            obj.embedding is not None
            and obj.embedding_model == current_model_name()
            and obj.embedding_hash == text_hash(obj.embedding_text)
        )

    def get_exclude(self, request, obj=None):
        return list(super().get_exclude(request, obj) or []) + ["embedding", "embedding_hash"]

    def get_readonly_fields(self, request, obj=None):
        return list(super().get_readonly_fields(request, obj)) + ["embedding_model", "embedded", "embedding_current"]
