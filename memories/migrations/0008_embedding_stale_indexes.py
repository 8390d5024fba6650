"""The indexes that let the embedding backfill find memories needing a vector by index lookups (a partial index of
stale rows, an index of the vector's model), and statistics on staleness, so PostgreSQL knows how few rows are stale.

The indexes build CONCURRENTLY (outside a transaction): the tables take writes while they build. A build that is
interrupted leaves an INVALID index: migrate again (the indexes built are kept, an INVALID one is built again)."""

from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable

from embeddings.migration_ops import EmbeddingStaleStatistics
from embeddings.models import EmbeddingStale


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while an index builds

    dependencies = [
        ("embeddings", "0003_embedding_stale_function"),
        ("memories", "0007_simhash_again"),
    ]

    operations = [
        AddIndexConcurrentlyResumable(
            model_name="memory",
            index=models.Index(condition=models.Q(EmbeddingStale("content")), fields=["id"], name="memory_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="memory", index=models.Index(fields=["embedding_model"], name="memory_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="memory", text_field="content"),
    ]
