"""``embedding_stale(embedding, embedding_hash, text)``: the SQL function the partial indexes of each app's embedded
tables hold (``embeddings.models.embedding_work_indexes``), so the backfill finds stale rows without hashing every
row. A change of ``embeddings.embedders.MIN_NORM`` needs a migration that creates it again with the new value."""

from django.db import migrations

from embeddings.migration_ops import CreateEmbeddingStaleFunction

MIN_NORM = 1e-6  # embeddings.embedders.MIN_NORM when this was written


class Migration(migrations.Migration):
    dependencies = [("embeddings", "0002_vectors_without_direction_cleared")]

    operations = [CreateEmbeddingStaleFunction(min_norm=MIN_NORM)]
