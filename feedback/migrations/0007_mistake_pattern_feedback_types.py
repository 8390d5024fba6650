"""A mistake pattern keeps the types of the records it grouped (``feedback_types``), so a filter by type still finds
it once its records are archived. Filled here from the live and the archived records."""

import django.contrib.postgres.fields
from django.db import migrations, models

from tenants.rls import every_tenant

_FILL_SQL = """
UPDATE feedback_mistakepattern p
   SET feedback_types = t.types
  FROM (SELECT pattern_id, array_agg(DISTINCT feedback_type ORDER BY feedback_type) AS types
          FROM (SELECT pattern_id, feedback_type FROM feedback_feedbackrecord WHERE pattern_id IS NOT NULL
                UNION ALL
                SELECT pattern_id, feedback_type FROM feedback_feedbackrecordarchive WHERE pattern_id IS NOT NULL) r
         GROUP BY pattern_id) t
 WHERE t.pattern_id = p.id
"""


def types_filled(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction)."""
    with every_tenant(schema_editor.connection), schema_editor.connection.cursor() as cur:
        cur.execute(_FILL_SQL)


class Migration(migrations.Migration):
    dependencies = [("feedback", "0006_mistake_categories_normalized")]

    operations = [
        migrations.AddField(
            model_name="mistakepattern",
            name="feedback_types",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=20),
                blank=True,
                default=list,
                help_text="The types of the records it grouped, sorted (kept when the records are archived).",
            ),
        ),
        migrations.RunPython(types_filled, migrations.RunPython.noop),
    ]
