from django.apps import AppConfig
from django.db.models.signals import post_migrate

import tenants.tasks  # noqa: F401  (registers the header that carries the sender's tenant with every task sent)
from tenants.context import DEFAULT_SLUG


def _default_tenant(sender, **kwargs):
    """The default tenant exists after every migrate and flush (tests flush between transactional cases)."""
    sender.get_model("Tenant").objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        post_migrate.connect(_default_tenant, sender=self)
