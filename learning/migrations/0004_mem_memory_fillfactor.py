# Memories get hits/streak/last_retrieved_at bumped on every retrieval. Leaving room in
# each page lets PostgreSQL do those updates as HOT updates (no new index entries, the
# HNSW index above all), since none of those columns is indexed.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("learning", "0003_mem_memories"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE learning_memory SET (fillfactor = 70)",
            reverse_sql="ALTER TABLE learning_memory RESET (fillfactor)",
        ),
        # Retrieval checks for memories still waiting for a vector on every call; this keeps that check free.
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("embedding__isnull", True)), fields=["user_id", "namespace"], name="memory_unembedded"
            ),
        ),
    ]
