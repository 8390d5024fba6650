"""A b-tree over the phrase evidence's tenant, user and private agent: every resolve counts the evidence rows of its
scope (up to RESOLVE_USER_EXACT_MAX_PHRASES + 1) to choose between comparing them exactly and walking their HNSW
index; within a tenant, the user index alone makes PostgreSQL read the whole unique index instead.

The index builds CONCURRENTLY (outside a transaction): the table takes writes while it builds. A build that is
interrupted leaves an INVALID index: migrate again (it is dropped and built again)."""

from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while the index builds

    dependencies = [
        ("learning", "0023_resolutionrecord_explanation"),
    ]

    operations = [
        AddIndexConcurrentlyResumable(
            model_name="phraseevidence",
            index=models.Index(fields=["tenant", "user_id", "private_agent"], name="phraseevidence_user_scope"),
        ),
    ]
