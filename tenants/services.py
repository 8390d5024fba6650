"""Writes of tenants and memberships."""

import re

from django.db import transaction

from common.api import ApplicationError
from tenants.models import DEFAULT_SLUG, Membership, Tenant

SLUG_RE = re.compile(r"[-a-zA-Z0-9_]{1,60}")  # whole string (fullmatch)


def tenant_ensure_default() -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})
    return tenant


@transaction.atomic
def tenant_create(*, slug: str, name: str = "") -> Tenant:
    """The tenant with this slug, created if new (``name`` defaults to the slug)."""
    if not SLUG_RE.fullmatch(slug or ""):
        raise ApplicationError(f"A tenant slug is 1 to 60 letters, digits, - or _, not {slug!r}.", field="slug")
    if len(name) > Tenant._meta.get_field("name").max_length:
        raise ApplicationError(f"A tenant name is at most {Tenant._meta.get_field('name').max_length} characters.", field="name")
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


@transaction.atomic
def membership_add(*, user, tenant: Tenant) -> Membership:
    membership, _ = Membership.objects.get_or_create(user=user, tenant=tenant)
    try:  # this user object's tenants are read again when next asked (a request's user is a lazy object)
        del user._tenant_ids_cache
    except AttributeError:
        pass
    return membership
