"""A b-tree over the active entity aliases' tenant, user and entity type: a lookup that finds no alias spelled the
same counts the aliases of its scope (the user's and the global ones, of one entity type when given) to choose
between comparing them exactly and walking their HNSW index; the unique index, which leads with the text, made
PostgreSQL read all of it for that count, so a lookup slowed with every alias of every user.

The index builds CONCURRENTLY (outside a transaction): the table takes writes while it builds. A build that is
interrupted leaves an INVALID index: migrate again (it is dropped and built again)."""

from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while the index builds

    dependencies = [
        ("learning", "0024_phraseevidence_user_scope"),
    ]

    operations = [
        AddIndexConcurrentlyResumable(
            model_name="entityalias",
            index=models.Index(
                condition=models.Q(("is_active", True)),
                fields=["tenant", "user_id", "entity_type"],
                name="entityalias_scope",
            ),
        ),
    ]
