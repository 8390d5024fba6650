"""An HNSW index over the global learned phrases alone (``user_id IS NULL``): resolving walks it for the global
neighbours and reads a user's own phrases through their b-tree, instead of walking the index over every phrase and
skipping the other users' (learning.selectors.tiers.tier_rows).

The index builds CONCURRENTLY (outside a transaction): the table takes writes while it builds. A build that is
interrupted leaves an INVALID index: migrate again (it is dropped and built again)."""

import pgvector.django.indexes
from django.conf import settings
from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while the index builds

    dependencies = [
        ("learning", "0016_candidate_private_agent"),
    ]

    operations = [
        # the graph built in memory, as sync_tenant_indexes builds the tenants' own (a large table builds far faster)
        migrations.RunSQL(
            f"SET maintenance_work_mem = '{settings.LEARNED_INDEX_BUILD_MEMORY}'", reverse_sql=migrations.RunSQL.noop
        ),
        AddIndexConcurrentlyResumable(
            model_name="learnedphrase",
            index=pgvector.django.indexes.HnswIndex(
                condition=models.Q(("user_id__isnull", True)),
                ef_construction=64,
                fields=["embedding"],
                m=16,
                name="learnedphrase_global_hnsw",
                opclasses=["vector_cosine_ops"],
            ),
        ),
        migrations.RunSQL("RESET maintenance_work_mem", reverse_sql=migrations.RunSQL.noop),
    ]
