"""An API key's scopes are a JSON array: a key stored with anything else (which granted by substring, or failed
every request) is left with no scopes, then the database refuses anything but an array."""

import django.db.models.lookups
from django.db import migrations, models

NOT_AN_ARRAY_CLEARED = "UPDATE agents_apikey SET scopes = '[]'::jsonb WHERE jsonb_typeof(scopes) <> 'array'"


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_idempotent_request_embedding_pending"),
    ]

    operations = [
        migrations.RunSQL(NOT_AN_ARRAY_CLEARED, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=django.db.models.lookups.Exact(
                    models.Func("scopes", function="jsonb_typeof", output_field=models.CharField()), "array"
                ),
                name="api_key_scopes_array",
                violation_error_message="A key's scopes are a list.",
            ),
        ),
    ]
