"""Signed-in reviewers (the admin, the console) see only their tenants' rows: superusers every tenant."""

from tenants.context import tenant_scope
from tenants.selectors import user_tenant_ids

UNSCOPED_PREFIXES = ("/api/", "/mcp", "/static/")


class TenantSessionMiddleware:
    """Wraps a signed-in user's request in a tenant scope of their memberships (one transaction).

    API requests are scoped by their view (``agents.api.TenantApiView``) from the key or reviewer token.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if request.path.startswith(UNSCOPED_PREFIXES) or user is None or not user.is_authenticated:
            return self.get_response(request)
        with tenant_scope(user_tenant_ids(user)):
            return self.get_response(request)
