from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('learning', '0004_catalogue_stamp'),
        ('tenants', '0002_inherit_triggers_per_table'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='decisionfit',
            name='version',
            field=models.PositiveIntegerField(help_text="Counts a tenant's fits: v1, v2, ..."),
        ),
        migrations.AddConstraint(
            model_name='decisionfit',
            constraint=models.UniqueConstraint(fields=('tenant', 'version'), name='decisionfit_version_unique_per_tenant'),
        ),
    ]
