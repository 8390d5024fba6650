"""The indexes that let the embedding backfill find memories needing a vector by index lookups (a partial index of
stale rows, an index of the vector's model), and statistics on staleness, so PostgreSQL knows how few rows are stale."""

from django.db import migrations, models

from embeddings.migration_ops import EmbeddingStaleStatistics
from embeddings.models import EmbeddingStale


class Migration(migrations.Migration):
    dependencies = [
        ("embeddings", "0003_embedding_stale_function"),
        ("memories", "0007_simhash_again"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(EmbeddingStale("content")), fields=["id"], name="memory_emb_stale"),
        ),
        migrations.AddIndex(model_name="memory", index=models.Index(fields=["embedding_model"], name="memory_emb_model")),
        EmbeddingStaleStatistics(model_name="memory", text_field="content"),
    ]
