import django.db.models.deletion
import learning.triggers
import tenants.models
import tenants.rls
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('learning', '0003_tenants'),
        ('tenants', '0002_inherit_triggers_per_table'),
    ]

    operations = [
        migrations.CreateModel(
            name='CatalogueStamp',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version', models.BigIntegerField()),
                ('tenant', models.ForeignKey(db_default=tenants.models.CurrentTenant(), editable=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenants.tenant')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('tenant',), name='cataloguestamp_one_per_tenant')],
            },
        ),
        tenants.rls.EnableTenantRLS(model_name="CatalogueStamp"),
        migrations.RunSQL(learning.triggers.INSTALL_SQL, learning.triggers.REMOVE_SQL),
    ]
