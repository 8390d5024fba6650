"""A b-tree over the active learned phrases' tenant and private agent: counting a scope's active phrases (the admin
index, ``/learning/stats``) reads it instead of the table, whose rows carry their vectors (at 100,000 phrases: about
6 ms against 80).

The index builds CONCURRENTLY (outside a transaction): the table takes writes while it builds. A build that is
interrupted leaves an INVALID index: migrate again (it is dropped and built again)."""

from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while the index builds

    dependencies = [
        ("agents", "0005_api_key_scopes_array"),
        ("learning", "0018_resolution_outcome_choices"),
        ("tenants", "0003_policies_evaluate_scope_once"),
    ]

    operations = [
        AddIndexConcurrentlyResumable(
            model_name="learnedphrase",
            index=models.Index(
                condition=models.Q(("is_active", True)), fields=["tenant", "private_agent"], name="learnedphrase_active"
            ),
        ),
    ]
