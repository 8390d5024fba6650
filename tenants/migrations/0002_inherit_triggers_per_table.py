from django.db import migrations

import tenants.rls


class Migration(migrations.Migration):
    """Per-table tenant inheritance triggers in place of the generic one (a dynamic query per inserted row)."""

    dependencies = [("tenants", "0001_initial")]

    operations = [migrations.RunPython(tenants.rls.inherit_triggers_rewrite, migrations.RunPython.noop)]
