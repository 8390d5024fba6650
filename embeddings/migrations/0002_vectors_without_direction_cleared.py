"""Vectors with no direction (a zero vector an embedding server answered before vectors were checked) cleared, so
every row that holds one reads as not embedded at once: the resolver's tiers treat it so (a block then blocks its
verb outright, as one that cannot be compared), and the backfill embeds it again."""

import logging

from django.db import migrations

from tenants.rls import every_tenant

logger = logging.getLogger(__name__)

MIN_NORM = 1e-6  # embeddings.embedders.MIN_NORM when this was written


def vectors_without_direction_cleared(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction), one UPDATE a table."""
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    with every_tenant(connection), connection.cursor() as cursor:
        for model in apps.get_models():
            names = {f.name for f in model._meta.concrete_fields}
            if not {"embedding", "embedding_model", "embedding_hash"} <= names or model._meta.proxy:
                continue
            cursor.execute(
                f"UPDATE {quote(model._meta.db_table)} SET embedding = NULL, embedding_model = '', embedding_hash = '' "
                "WHERE embedding IS NOT NULL AND vector_norm(embedding) < %s",
                [MIN_NORM],
            )
            if cursor.rowcount:
                logger.info("%s: %d vector(s) with no direction cleared", model._meta.label, cursor.rowcount)


class Migration(migrations.Migration):
    dependencies = [
        ("embeddings", "0001_initial"),
        ("learning", "0012_normalized_again"),
        ("memories", "0007_simhash_again"),
    ]

    operations = [migrations.RunPython(vectors_without_direction_cleared, migrations.RunPython.noop)]
