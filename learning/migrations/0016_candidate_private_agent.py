"""A user's learning candidate is kept apart per agent with private user data, as its learned phrases are: no shared
agent's traffic adds to it and it adds to none of theirs. Candidates stored before that were proposed or repeated by
one such agent (private then, by its audit trail) only become that agent's; the others stay shared (a reviewer's approval still reaches every owner
whose traffic they hold)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from tenants.rls import every_tenant

_OWNED_SQL = """
UPDATE learning_learningcandidate c
   SET private_agent_id = a.id
  FROM agents_agent a
 WHERE c.user_id IS NOT NULL AND c.private_agent_id IS NULL
   AND a.id = c.proposed_by_agent_id
   AND c.seen_by_agents <@ ARRAY[a.id]::bigint[]
   -- private when the candidate was proposed (switching an agent to private later does not take what it wrote while
   -- shared): its audit trail as of then, else its flag now
   AND COALESCE((SELECT h.private_user_data FROM agents_historicalagent h
                  WHERE h.id = a.id AND h.history_date <= c.created_at
                  ORDER BY h.history_date DESC, h.history_id DESC LIMIT 1), a.private_user_data)
"""


def owners_filled(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction)."""
    with every_tenant(schema_editor.connection), schema_editor.connection.cursor() as cur:
        cur.execute(_OWNED_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0005_api_key_scopes_array"),
        ("learning", "0015_learningsignal_global_candidate"),
        ("tenants", "0003_policies_evaluate_scope_once"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="learningcandidate",
            name="candidate_one_pending_per_proposal",
        ),
        migrations.AddField(
            model_name="historicallearningcandidate",
            name="private_agent",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                help_text="The agent with private user data whose user's proposal this is (only its traffic adds to it); empty: the tenant's agents share it",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="agents.agent",
            ),
        ),
        migrations.AddField(
            model_name="learningcandidate",
            name="private_agent",
            field=models.ForeignKey(
                blank=True,
                help_text="The agent with private user data whose user's proposal this is (only its traffic adds to it); empty: the tenant's agents share it",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="agents.agent",
            ),
        ),
        migrations.RunPython(owners_filled, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="learningcandidate",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "pending")),
                fields=("tenant", "candidate_type", "normalized", "suggested_output", "user_id", "private_agent"),
                name="candidate_one_pending_per_proposal",
                nulls_distinct=False,
            ),
        ),
    ]
