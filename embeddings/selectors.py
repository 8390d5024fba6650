"""Reads for embeddings: rows whose vector is missing or stale."""

from django.apps import apps
from django.db.models import CharField, F, Func, Q, QuerySet

from embeddings.models import Embedded


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


def embedded_models() -> list[type[Embedded]]:
    """Every installed model whose rows carry a vector (subclasses of ``Embedded``), in a stable order."""
    return sorted((m for m in apps.get_models() if issubclass(m, Embedded)), key=lambda m: m._meta.label)
