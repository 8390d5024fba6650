"""Memory API: observe a turn, retrieve context, give feedback, search.

Scopes: ``feedback`` for observe and feedback, ``resolve`` for retrieve and search.
Every call names one user; memory ids of another user answer 404 like unknown ids.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from agents.api import TenantApiView
from agents.authentication import ScopePermission
from common.schema import ERROR_RESPONSES
from embeddings.budget import PENDING_HEADER
from memories.selectors import memory_search_text
from memories.serializers import (
    MemoryFeedbackRequestSerializer,
    MemoryFeedbackResponseSerializer,
    MemoryItemSerializer,
    MemorySearchRequestSerializer,
    MemorySearchResponseSerializer,
    MemoryStateSerializer,
    ObserveRequestSerializer,
    ObserveResponseSerializer,
    RetrieveRequestSerializer,
    RetrieveResponseSerializer,
    SearchHitSerializer,
)
from memories.services import memory_feedback_apply, memory_observe, memory_retrieve

ERRORS_404 = {**ERROR_RESPONSES, 404: ERROR_RESPONSES[400]}

EMBEDDING_PENDING = OpenApiParameter(
    PENDING_HEADER,
    OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    response=[200],
    enum=["1"],
    description="1 when the stored or changed memory has no vector yet (the embedder is down or the request's "
    "embedding budget is spent); it is embedded later and retrieval finds it then. Absent otherwise.",
)


class MemoryObserveApi(TenantApiView):
    """Learn from one conversation turn: extract, gate, deduplicate, store."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(
        request=ObserveRequestSerializer,
        responses={
            200: OpenApiResponse(ObserveResponseSerializer, description=f"The decision; see the {PENDING_HEADER} header"),
            **ERRORS_404,
        },
        parameters=[EMBEDDING_PENDING],
    )
    def post(self, request):
        serializer = ObserveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = memory_observe(
            user_id=data["user_id"],
            user_message=data["user_message"],
            assistant_message=data["assistant_message"],
            meta=data.get("meta") or {},
        )
        response = Response({"decision": result.decision, "memory_id": result.memory_id, "evidence": result.evidence})
        if result.embedding_pending:
            response[PENDING_HEADER] = "1"
        return response


class MemoryRetrieveApi(TenantApiView):
    """The user's best memories for a query, with a block ready to inject into a prompt."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=RetrieveRequestSerializer, responses={200: RetrieveResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = RetrieveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = memory_retrieve(
            user_id=data["user_id"],
            query=data["query"],
            filters=data.get("filters") or {},
            count_hits=request.auth.has_scope("feedback"),  # a read-only key reads and writes nothing
        )
        return Response(
            {
                "items": MemoryItemSerializer(result.items, many=True).data,
                "block": result.block,
                "degraded": result.degraded,
                "degraded_reason": result.degraded_reason,
                "retrieval_id": result.retrieval_id,
            }
        )


class MemoryOutcomeApi(TenantApiView):
    """Promote (success) or deprecate (failure) memories, by id or the user's last retrieval."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(request=MemoryFeedbackRequestSerializer, responses={200: MemoryFeedbackResponseSerializer, **ERRORS_404})
    def post(self, request):
        serializer = MemoryFeedbackRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        rows = memory_feedback_apply(
            user_id=data["user_id"],
            memory_ids=data["memory_ids"],
            outcome=data["outcome"],
            reason=data["reason"],
            namespace=data.get("namespace"),
        )
        return Response({"outcome": data["outcome"], "memories": MemoryStateSerializer(rows, many=True).data})


class MemorySearchApi(TenantApiView):
    """Semantic and/or substring search over the user's memories, ranked, with scores. Read only."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=MemorySearchRequestSerializer, responses={200: MemorySearchResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = MemorySearchRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        hits, reason = memory_search_text(
            query=data["query"],
            user_id=data["user_id"],
            mode=data["mode"],
            limit=data["limit"],
            include_deprecated=data["include_deprecated"],
            filters=data.get("filters") or {},
        )
        return Response(
            {"results": SearchHitSerializer(hits, many=True).data, "degraded": bool(reason), "degraded_reason": reason}
        )
