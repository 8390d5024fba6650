"""Reads of tenants and reviewers' memberships."""

import re

from tenants.context import ALL
from tenants.models import DEFAULT_SLUG, Membership, Tenant

_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,60}")


def tenant_default() -> Tenant:
    return Tenant.objects.get(slug=DEFAULT_SLUG)


def tenant_get(*, slug: str) -> Tenant | None:
    """The tenant with this slug; None for none, and for text no slug can be (not sent to the database: a NUL or
    undecodable command-line bytes would fail there)."""
    if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
        return None
    return Tenant.objects.filter(slug=slug).first()


def user_tenant_ids(user):
    """The tenants a signed-in user may see: ``ALL`` for a superuser, else their memberships' ids, read once per
    user object (a request's: the scope middleware and the page both ask, as Django caches permissions)."""
    if user is None or not user.is_authenticated:
        return ()
    if user.is_superuser:
        return ALL
    if not hasattr(user, "_tenant_ids_cache"):
        user._tenant_ids_cache = tuple(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))
    return user._tenant_ids_cache


def user_tenants(*, user):
    """The tenants a signed-in user may see (``user_tenant_ids``), as a queryset."""
    ids = user_tenant_ids(user)
    return Tenant.objects.all() if ids == ALL else Tenant.objects.filter(pk__in=ids)


def user_home_tenant_id(user) -> int | None:
    """The one tenant a signed-in person works in where one is needed (the console): their first membership (the
    oldest: a membership added later does not move them); a superuser without memberships works in the default tenant."""
    if user is None or not user.is_authenticated:
        return None
    first = Membership.objects.filter(user=user).order_by("pk").values_list("tenant_id", flat=True).first()
    if first is None and user.is_superuser:
        return Tenant.objects.filter(slug=DEFAULT_SLUG).values_list("pk", flat=True).first()
    return first


def tenant_ids_all() -> list[int]:
    return list(Tenant.objects.order_by("pk").values_list("pk", flat=True))
