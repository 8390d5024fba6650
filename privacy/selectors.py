from common.api import Conflict, NotFound
from tenants.context import tenant_filter_ids
from tenants.models import Tenant
from tenants.selectors import tenant_get


def erasure_tenant(*, slug: str | None) -> Tenant:
    """The tenant whose user is erased: the one named (among those the caller sees), else the only one it sees."""
    visible = tenant_filter_ids()  # None: every tenant (a superuser)
    if slug is not None:
        tenant = tenant_get(slug=slug)
        if tenant is None or (visible is not None and tenant.pk not in visible):
            raise NotFound(f"No tenant {slug!r}.", field="tenant")
        return tenant
    seen = Tenant.objects.all() if visible is None else Tenant.objects.filter(pk__in=visible)
    tenants = list(seen.order_by("slug")[:2])
    if len(tenants) != 1:
        raise Conflict(
            "A user id is one tenant's user and this caller sees several tenants: name the tenant (tenant).",
            field="tenant",
            code="ambiguous",
        )
    return tenants[0]
