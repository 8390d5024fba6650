"""The base of every API view: one transaction per request that sees only the caller's tenant."""

from rest_framework.views import APIView

from tenants.context import tenant_request


class TenantApiView(APIView):
    """Each request runs in one transaction; authentication names the caller's tenant for it (``SET LOCAL``),
    so every query, including one the code forgets to filter, sees only that tenant's rows."""

    def dispatch(self, request, *args, **kwargs):
        with tenant_request():
            return super().dispatch(request, *args, **kwargs)
