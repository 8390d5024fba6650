"""Memory API: observe a turn, retrieve context, give feedback, search.

Scopes: ``feedback`` for observe and feedback, ``resolve`` for retrieve and search.
Every call names one user; memory ids of another user answer 404 like unknown ids.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.authentication import ScopePermission
from common.schema import ERROR_RESPONSES
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
from memories.services import memory_feedback, memory_observe, memory_retrieve

ERRORS_404 = {**ERROR_RESPONSES, 404: ERROR_RESPONSES[400]}


class MemoryObserveApi(APIView):
    """Learn from one conversation turn: extract, gate, deduplicate, store."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(request=ObserveRequestSerializer, responses={200: ObserveResponseSerializer, **ERROR_RESPONSES})
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
        return Response({"decision": result.decision, "memory_id": result.memory_id, "evidence": result.evidence})


class MemoryRetrieveApi(APIView):
    """The user's best memories for a query, with a block ready to inject into a prompt."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=RetrieveRequestSerializer, responses={200: RetrieveResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = RetrieveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = memory_retrieve(user_id=data["user_id"], query=data["query"], filters=data.get("filters") or {})
        return Response(
            {
                "items": MemoryItemSerializer(result.items, many=True).data,
                "block": result.block,
                "degraded": result.degraded,
                "degraded_reason": result.degraded_reason,
                "retrieval_id": result.retrieval_id,
            }
        )


class MemoryOutcomeApi(APIView):
    """Promote (success) or deprecate (failure) memories, by id or the user's last retrieval."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(request=MemoryFeedbackRequestSerializer, responses={200: MemoryFeedbackResponseSerializer, **ERRORS_404})
    def post(self, request):
        serializer = MemoryFeedbackRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        rows = memory_feedback(
            user_id=data["user_id"],
            memory_ids=data["memory_ids"],
            outcome=data["outcome"],
            reason=data["reason"],
            namespace=data.get("namespace"),
        )
        return Response({"outcome": data["outcome"], "memories": MemoryStateSerializer(rows, many=True).data})


class MemorySearchApi(APIView):
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
