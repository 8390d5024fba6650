from django.apps import AppConfig
from django.db.models.signals import post_migrate

from tenants.context import DEFAULT_SLUG


def _default_tenant(sender, **kwargs):
    """The default tenant exists after every migrate and flush (tests flush between transactional cases)."""
    sender.get_model("Tenant").objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        # registers the header that carries the sender's tenant with every task sent; here, once the models are
        # loaded, as the tasks module reads them (common.tasks, through the audit trail's retention)
        import tenants.tasks  # noqa: F401

        post_migrate.connect(_default_tenant, sender=self)
