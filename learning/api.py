"""Learning API: resolve what a user typed."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from autonomy.authentication import ScopePermission
from config.schema import ERROR_RESPONSES
from feedback.services import disambiguation_record
from learning.resolution import resolve
from learning.serializers import ResolveRequestSerializer, ResolveResponseSerializer


class ResolveApi(APIView):
    """Resolve a user's text to a verb, ambiguity options, or no match."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=ResolveRequestSerializer, responses={200: ResolveResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = ResolveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = resolve(**serializer.validated_data)
        disambiguation_record(resolution=result, agent=request.user, domain=serializer.validated_data.get("domain"))
        body = result.as_dict()
        if result.outcome != "ambiguous":
            body.pop("options")
        for key in ("text", "user_id", "model"):
            body.pop(key)
        return Response(body)
