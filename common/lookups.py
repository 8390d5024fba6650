"""Reads shared by apps whose names are unique per tenant only."""

from common.api import ApplicationError, Conflict, NotFound
from common.parsers import text_problem


def tenant_one(queryset, *, tenant: str | None, label: str, field: str, missing: str, hint: str):
    """The one row of ``queryset`` (rows with a ``tenant``), in the tenant with slug ``tenant`` when given. Names are
    unique per tenant only, and a reviewer or a command sees several tenants: a name several of them use is refused
    without the tenant (409 ``ambiguous``, naming them and how to choose: ``hint``), never one picked at random; none
    answers 404 with ``missing`` (and the tenant when given)."""
    if tenant is not None and not tenant.strip():  # an empty --tenant (a variable left unset) names no tenant
        raise ApplicationError("The tenant is empty; give its slug.", field="tenant")
    if tenant:
        problem = text_problem(tenant)
        if problem:
            raise ApplicationError(f"The tenant {problem}.", field="tenant")
        queryset = queryset.filter(tenant__slug=tenant)
    found = list(queryset.select_related("tenant").order_by("tenant__slug"))
    if not found:
        raise NotFound(f"{missing}" + (f" in tenant {tenant}." if tenant else "."), field=field)
    if len(found) > 1:
        slugs = ", ".join(row.tenant.slug for row in found)
        raise Conflict(f"{label} is in several tenants ({slugs}); {hint}.", field=field, code="ambiguous")
    return found[0]
