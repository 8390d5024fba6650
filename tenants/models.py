"""Tenants (workspaces), their reviewers, and the base every tenant-owned model inherits."""

from django.conf import settings
from django.db import models
from django.db.models import Func
from simple_history.models import HistoricalRecords

from tenants.context import DEFAULT_SLUG, tenant_filter_ids

__all__ = ["DEFAULT_SLUG", "Membership", "Tenant", "TenantOwned"]


class Tenant(models.Model):
    """A workspace: owns its agents, catalogue, learned data, outcomes and governance."""

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords()

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.name or self.slug


class Membership(models.Model):
    """A reviewer's access to a tenant: they see and decide only their tenants' items."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique")]

    def __str__(self):
        return f"{self.user} in {self.tenant}"


class CurrentTenant(Func):
    """The database default of every ``tenant`` column: the tenant of the open scope (``app.tenant_ids``).

    One tenant in scope gives that tenant; no scope or the all-tenants scope gives the default tenant;
    several tenants in scope give NULL, so the insert fails unless the code names the tenant.
    """

    function = "tenants_current_id"
    template = "%(function)s()"
    output_field = models.BigIntegerField()


class TenantQuerySet(models.QuerySet):
    def for_tenants(self, tenant_ids):
        return self.filter(tenant_id__in=list(tenant_ids))


class TenantManager(models.Manager.from_queryset(TenantQuerySet)):
    """Filters by the tenants in scope (``tenants.context``); unfiltered outside any scope (commands, workers)."""

    def get_queryset(self):
        queryset = super().get_queryset()
        ids = tenant_filter_ids()
        return queryset if ids is None else queryset.filter(tenant_id__in=ids)


class TenantOwned(models.Model):
    """A row that belongs to one tenant; PostgreSQL's row-level security enforces it (``tenants/rls.py``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_default=CurrentTenant(), editable=False)

    objects = TenantManager()

    class Meta:
        abstract = True
