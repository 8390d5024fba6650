from django.db import migrations

import tenants.rls


class Migration(migrations.Migration):
    """Policies read the tenant scope once per statement instead of once per row."""

    dependencies = [("tenants", "0002_inherit_triggers_per_table")]

    operations = [migrations.RunPython(tenants.rls.policies_rewrite, migrations.RunPython.noop)]
