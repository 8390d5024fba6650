"""The disambiguation console: a page where a signed-in person types requests and clicks options.

The page posts (session cookie + CSRF token) to the console endpoints below,
which call the same services as the agent API, with the API's JSON parser; the console's end-user id is
``console:<username>`` (``console_user_id``), in the person's home tenant (a person in none is refused).
"""

import re

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path, reverse_lazy
from django.views.decorators.csrf import ensure_csrf_cookie
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api import RollbackOnError
from common.fields import VisibleTextField
from common.parsers import CheckedFormParser, CheckedMultiPartParser, LimitedJSONParser
from common.schema import ERROR_RESPONSES
from common.validators import CONSOLE_USER_PREFIX, USER_ID_RE
from learning.api import abandon_answer, selection_answer
from learning.models import DisambiguationRequest
from learning.resolution import resolve
from learning.serializers import (
    DisambiguationAbandonSerializer,
    DisambiguationAnswerSerializer,
    DisambiguationSelectSerializer,
    ResolveResponseSerializer,
)
from learning.services.disambiguations import disambiguation_abandon, disambiguation_select, resolution_store
from tenants.context import tenant_scope
from tenants.selectors import user_home_tenant_id

CONSOLE = DisambiguationRequest.Channel.CONSOLE


def console_user_id(user) -> str:
    """The end-user id the console acts as for a signed-in person: ``console:<username>``, or ``console:<pk>`` for a
    username a user id cannot hold. A username of digits only takes the second form too: it could otherwise be
    another person's ``console:<pk>``, and one person would answer the other's requests and share their phrases."""
    username = user.get_username()
    candidate = f"{CONSOLE_USER_PREFIX}{username}"
    if re.fullmatch(USER_ID_RE, candidate) and not re.fullmatch(r"[0-9]+", username):
        return candidate
    return f"{CONSOLE_USER_PREFIX}{user.pk}"


NO_TENANT = "Your account belongs to no tenant: an administrator adds you to one (admin, Tenants) before you use the console."


@ensure_csrf_cookie
@login_required(login_url=reverse_lazy("console-login"))
def console_page(request):
    if user_home_tenant_id(request.user) is None:
        return render(request, "console/index.html", {"no_tenant": NO_TENANT}, status=403)
    return render(
        request, "console/index.html", {"timeout_s": settings.CONSOLE_TIMEOUT_S, "user_id": console_user_id(request.user)}
    )


class InATenant(BasePermission):
    message = NO_TENANT

    def has_permission(self, request, view):
        return view.tenant_id is not None


class ConsoleApi(RollbackOnError, APIView):
    """Session-authenticated; resolves within the person's home tenant (``user_home_tenant_id``)."""

    authentication_classes = [SessionAuthentication]  # enforces CSRF
    permission_classes = [IsAuthenticated, InATenant]
    # the API's JSON parser (its body size, nesting and value limits); sendBeacon posts form data
    parser_classes = [LimitedJSONParser, CheckedFormParser, CheckedMultiPartParser]

    tenant_id = None

    def dispatch(self, request, *args, **kwargs):
        self.tenant_id = tenant_id = user_home_tenant_id(getattr(request, "user", None))
        if tenant_id is None:  # anonymous, or in no tenant: the permissions answer 403 before anything is read
            return super().dispatch(request, *args, **kwargs)
        with tenant_scope([tenant_id]):
            return super().dispatch(request, *args, **kwargs)


class ConsoleResolveSerializer(serializers.Serializer):
    text = VisibleTextField(max_length=settings.RESOLVE_MAX_TEXT_LENGTH, trim_whitespace=True)  # as the API's


class ConsoleResolveApi(ConsoleApi):
    @extend_schema(exclude=True)
    def post(self, request):
        serializer = ConsoleResolveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = resolve(text=serializer.validated_data["text"], user_id=console_user_id(request.user))
        resolution_store(resolution=result, channel=CONSOLE)  # the console's answers are labels for the decision too
        return Response(ResolveResponseSerializer(result).data)


class ConsoleSelectApi(ConsoleApi):
    @extend_schema(
        exclude=True, request=DisambiguationSelectSerializer, responses={200: DisambiguationAnswerSerializer, **ERROR_RESPONSES}
    )
    def post(self, request, request_id):
        serializer = DisambiguationSelectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = disambiguation_select(
            request_id=request_id,
            selected_verb=serializer.validated_data["selected_verb"],
            args=serializer.validated_data.get("args"),
            user_id=console_user_id(request.user),
            channel=CONSOLE,
        )
        return Response(selection_answer(row))


class ConsoleAbandonApi(ConsoleApi):
    @extend_schema(exclude=True)
    def post(self, request, request_id):
        serializer = DisambiguationAbandonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = disambiguation_abandon(
            request_id=request_id,
            reason=serializer.validated_data["reason"],
            user_id=console_user_id(request.user),
            channel=CONSOLE,
        )
        return Response(abandon_answer(row))


urlpatterns = [
    path("", console_page, name="console"),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="console-login"),
    path("logout/", auth_views.LogoutView.as_view(next_page=reverse_lazy("console-login")), name="console-logout"),
    path("api/resolve", ConsoleResolveApi.as_view(), name="console-resolve"),
    path("api/disambiguations/<str:request_id>/select", ConsoleSelectApi.as_view(), name="console-select"),
    path("api/disambiguations/<str:request_id>/abandon", ConsoleAbandonApi.as_view(), name="console-abandon"),
]
