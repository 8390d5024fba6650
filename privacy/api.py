"""A data subject's request over the API: a human reviewer's token erases one user's data."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agents.api import TenantApiView
from agents.authentication import ScopePermission
from common.schema import ERROR_RESPONSES, ErrorSerializer
from privacy.selectors import erasure_tenant
from privacy.serializers import UserEraseResultSerializer, UserEraseSerializer
from privacy.services import user_data_erase
from tenants.context import tenant_scope


class UserEraseApi(TenantApiView):
    """Erase everything stored about one user of one tenant, in one transaction (``dry_run``: count only). A
    reviewer token of a user who may delete learned phrases and memories; agent keys get 403."""

    permission_classes = [ScopePermission]
    human_only = True
    reviewer_permissions = ["learning.delete_learnedphrase", "memories.delete_memory"]

    @extend_schema(
        request=UserEraseSerializer,
        responses={200: UserEraseResultSerializer, **ERROR_RESPONSES, 404: ErrorSerializer, 409: ErrorSerializer},
        summary="Erase one user's data (reviewer token)",
    )
    def post(self, request):
        s = UserEraseSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        tenant = erasure_tenant(slug=s.validated_data.get("tenant"))
        with tenant_scope([tenant.pk]):
            result = user_data_erase(
                user_id=s.validated_data["user_id"],
                dry_run=s.validated_data["dry_run"],
                actor=f"reviewer {request.user.username}",
            )
        return Response({**result, "tenant": tenant.slug})
