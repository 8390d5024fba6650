"""Autonomy API: the action catalogue, consult-before-acting, and transition decisions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from actions.models import ACTION_NAME_RE
from actions.selectors import action_count, action_get, action_list
from agents.api import TenantApiView
from agents.authentication import ScopePermission
from autonomy import selectors, services
from autonomy.serializers import (
    ActionListQuerySerializer,
    ActionSerializer,
    ActionStopQuerySerializer,
    ActionStopSerializer,
    ConsultQuerySerializer,
    ConsultSerializer,
    TransitionDecisionSerializer,
    TransitionListQuerySerializer,
    TransitionSerializer,
)
from common.api import ApplicationError
from common.schema import ERROR_RESPONSES, ErrorSerializer

_ERRORS = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: ErrorSerializer}


class ActionListApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(
        parameters=[ActionListQuerySerializer],
        responses={200: ActionSerializer(many=True), **_ERRORS},
        summary="The action catalogue and autonomy levels, by name (pages of up to 1,000; X-Total-Count: all)",
    )
    def get(self, request):
        q = ActionListQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        rows = action_list(limit=q.validated_data["limit"], offset=q.validated_data["offset"])
        return Response(ActionSerializer(rows, many=True).data, headers={"X-Total-Count": str(action_count())})


class ActionConsultApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "name", str, OpenApiParameter.PATH, pattern=ACTION_NAME_RE, description="Action name, e.g. email.send"
            ),
            ConsultQuerySerializer,
        ],
        responses={200: ConsultSerializer, **_ERRORS},
        summary="Consult before acting: adjusted confidence, warnings, active rules",
    )
    def get(self, request, name):
        q = ConsultQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        answer = selectors.action_consult(agent=request.user, action_name=name, confidence=q.validated_data["confidence"])
        return Response(ConsultSerializer(answer).data)


class TransitionListApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["governance"]

    @extend_schema(
        parameters=[TransitionListQuerySerializer],
        responses={200: TransitionSerializer(many=True), **_ERRORS},
        summary="Autonomy transitions (governance)",
    )
    def get(self, request):
        q = TransitionListQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        v = q.validated_data
        rows = selectors.transition_list(status=v.get("status"), limit=v["limit"], offset=v["offset"])
        total = selectors.transition_count(status=v.get("status"))
        return Response(TransitionSerializer(rows, many=True).data, headers={"X-Total-Count": str(total)})


class _DecisionApi(TenantApiView):
    """Decided only by a human: a reviewer token of a user with the permission; agent keys get 403."""

    permission_classes = [ScopePermission]
    human_only = True
    reviewer_permissions = ["autonomy.approve_autonomytransition"]
    service = None

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)],
        request=TransitionDecisionSerializer,
        responses={200: TransitionSerializer, **_ERRORS},
    )
    def post(self, request, pk):
        s = TransitionDecisionSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        t = type(self).service(transition=pk, user=request.user, notes=s.validated_data["notes"])
        return Response(TransitionSerializer(t).data)


class TransitionApproveApi(_DecisionApi):
    """Approve: the new level is applied and the transition marked applied, once (governance)."""

    service = staticmethod(services.autonomy_transition_approve)


class TransitionRejectApi(_DecisionApi):
    """Reject a proposed transition (governance)."""

    service = staticmethod(services.autonomy_transition_reject)


class ActionStopApi(TenantApiView):
    """Emergency stop: the action drops to level 1 at once. A human reviewer's token only; agent keys get 403.

    A reviewer's token sees every tenant of its user, and action names are unique per tenant only: when several of
    them have the action, the stop is refused (409 ``ambiguous``, naming the tenants) until the tenant is given, as
    ``?tenant=SLUG`` or the body's ``tenant`` (the same slug when both)."""

    write_query_params = frozenset({"tenant"})

    permission_classes = [ScopePermission]
    human_only = True
    reviewer_permissions = ["autonomy.approve_autonomytransition"]

    @extend_schema(
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, pattern=ACTION_NAME_RE), ActionStopQuerySerializer],
        request=ActionStopSerializer,
        responses={200: TransitionSerializer, **_ERRORS},
        summary="Emergency stop: demote an action to level 1 now (reviewer token)",
        description=(
            "The action drops to level 1 (propose only) at once. A reviewer token sees every tenant of its user; "
            "when several of them have an action of this name the stop is refused (409, code `ambiguous`, naming "
            "the tenants) until the tenant is given, as `?tenant=SLUG` or the body's `tenant` (the same slug when both)."
        ),
    )
    def post(self, request, name):
        query = ActionStopQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        body = ActionStopSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenants = {query.validated_data.get("tenant"), body.validated_data.get("tenant")} - {None}
        if len(tenants) > 1:
            raise ApplicationError("The query's tenant and the body's tenant differ; give one.", field="tenant")
        action = action_get(name=name, tenant=next(iter(tenants), None))
        stop = services.action_autonomy_stop(action=action, user=request.user, reason=body.validated_data["reason"])
        return Response(TransitionSerializer(stop).data)
