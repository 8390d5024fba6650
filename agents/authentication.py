"""API key authentication: ``Authorization: Bearer <key>``.

Failed attempts are counted per client address in the cache; past the limit
the client is throttled before any key is checked. A key that checked out is
remembered by this process for ``API_KEY_CACHE_S`` seconds (by its hash), so a
busy agent costs no key query per request; revoking a key, or editing it or its
agent in the admin, forgets it at once in that process, and every other process
stops accepting it within ``API_KEY_CACHE_S``. Failures are never remembered.
"""

import logging
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from agents.models import ApiKey, hash_key

logger = logging.getLogger(__name__)

LAST_USED_RESOLUTION_S = 60


def _client_ip(request) -> str:
    return request.META.get("REMOTE_ADDR", "unknown")


def _failure_limit() -> tuple[int, int]:
    rate = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"]
    count, period = rate.split("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]
    return int(count), seconds


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != self.keyword.lower():
            self._fail(request, "Authorization header must be 'Bearer <key>'.")
        limit, period = _failure_limit()
        ip_key = f"auth-fail:{_client_ip(request)}"
        if cache.get(ip_key, 0) >= limit:
            raise exceptions.Throttled(wait=period, detail="Too many failed authentications; wait and retry.")
        key = _active_key(hash_key(parts[1]))
        if key is None:
            self._fail(request, "Invalid or revoked API key.")
        now = timezone.now()
        if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
        return key.agent, key

    def _fail(self, request, message: str):
        limit, period = _failure_limit()
        ip_key = f"auth-fail:{_client_ip(request)}"
        if cache.add(ip_key, 1, period) is False:
            try:
                cache.incr(ip_key)
            except ValueError:
                cache.set(ip_key, 1, period)
        logger.info("failed API authentication from %s", _client_ip(request))
        raise exceptions.AuthenticationFailed(message)

    def authenticate_header(self, request):
        return self.keyword


_verified: dict[str, tuple[float, ApiKey]] = {}  # key hash -> (monotonic expiry, the key with its agent)
_verified_lock = threading.Lock()


def _active_key(digest: str) -> ApiKey | None:
    """The active key with this hash (and its agent), or None; remembered for API_KEY_CACHE_S when active."""
    ttl = settings.API_KEY_CACHE_S
    now = time.monotonic()
    if ttl > 0:
        hit = _verified.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
    key = ApiKey.objects.select_related("agent").filter(key_hash=digest).first()
    if key is None or not key.is_active:
        with _verified_lock:
            _verified.pop(digest, None)
        return None
    if ttl > 0:
        with _verified_lock:
            if len(_verified) >= 10_000:  # bounded: drop the lot rather than grow without end
                _verified.clear()
            _verified[digest] = (now + ttl, key)
    return key


def verified_keys_forget() -> None:
    """Forget every remembered key in this process (after a revocation or an edit of a key or an agent)."""
    with _verified_lock:
        _verified.clear()


class ScopePermission:
    """DRF permission: the key must carry every scope the view names in ``required_scopes``."""

    message = "This API key lacks the scope this endpoint needs."

    def has_permission(self, request, view):
        key = request.auth
        if not isinstance(key, ApiKey):
            return False
        missing = [s for s in getattr(view, "required_scopes", []) if not key.has_scope(s)]
        if missing:
            self.message = f"This API key lacks the scope: {', '.join(missing)}."
            return False
        return True

    def has_object_permission(self, request, view, obj):
        return True


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Describes API key authentication in the OpenAPI schema."""

    target_class = "agents.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Agent API key: `Authorization: Bearer <key>`"}
