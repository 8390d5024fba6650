from django.db import migrations

from embeddings.migration_ops import CreateVectorExtension


class Migration(migrations.Migration):
    """pgvector, before any table with a vector column."""

    initial = True
    dependencies = []
    operations = [CreateVectorExtension()]
