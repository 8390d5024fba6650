"""Writes of tenants and memberships."""

from django.db import transaction

from tenants.models import DEFAULT_SLUG, Membership, Tenant


def tenant_ensure_default() -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})
    return tenant


@transaction.atomic
def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


@transaction.atomic
def membership_add(*, user, tenant: Tenant) -> Membership:
    membership, _ = Membership.objects.get_or_create(user=user, tenant=tenant)
    return membership
