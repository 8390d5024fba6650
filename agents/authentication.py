"""API key authentication: ``Authorization: Bearer <key>``.

The key is always checked: a valid key is accepted whatever others did from the same address or
with the same prefix. Failed attempts are counted in the cache per client address and per
presented key prefix (``alg_<prefix>_``); past ``auth_failures`` (a throttle rate) on either, a
failure answers 429 with Retry-After instead of 401, so an attacker is slowed and told so, and
nobody else is locked out. The client address is ``REMOTE_ADDR``, or, when that is one of
``TRUSTED_PROXIES``, the right-most address of ``X-Forwarded-For`` that is not a trusted proxy.

A key that checked out is remembered by this process for ``API_KEY_CACHE_S`` seconds (by its
hash), so a busy agent costs no key query per request; revoking a key, or editing it or its
agent in the admin, forgets it at once in that process, and every other process stops accepting
it within ``API_KEY_CACHE_S``. Failures are never remembered. Valid keys are rate limited by
``ApiKeyRateThrottle`` (``API_KEY_RATE``).

Both limits are a protection, not part of the answer: when the cache that counts them fails (Redis behind
``CACHE_URL`` down, timing out or refusing), requests are served uncounted, a key's and a failure's answer as
without a limit, and a warning says so at most once a minute per process (with how many were served so).
"""

import ipaddress
import logging
import re
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, throttling
from rest_framework.authtoken.models import Token

from agents.models import ApiKey, hash_key
from tenants.context import tenant_enter
from tenants.selectors import user_tenant_ids

logger = logging.getLogger(__name__)

LAST_USED_RESOLUTION_S = 60


def _networks(values) -> list:
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            continue
    return out


def _trusted(address: str, networks: list) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in net for net in networks)


def client_ip(request) -> str:
    """The client's address: REMOTE_ADDR, unless that is a trusted proxy; then the right-most X-Forwarded-For
    entry that is not itself a trusted proxy (entries left of it could be written by the client)."""
    remote = request.META.get("REMOTE_ADDR") or "unknown"
    networks = _networks(settings.TRUSTED_PROXIES)
    if not networks or not _trusted(remote, networks):
        return remote
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
    for address in reversed(forwarded):
        if not _trusted(address, networks):
            try:
                return str(ipaddress.ip_address(address))
            except ValueError:
                return remote  # garbage from a proxy: count it against the proxy's own address
    return remote


def _failure_limit() -> tuple[int, int]:
    """(failures, seconds) of ``auth_failures`` (``AUTH_FAILURE_RATE``, checked at the start), read as DRF reads a rate."""
    count, period = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"].lower().split("/")
    return int(count), {"s": 1, "m": 60, "h": 3600, "d": 86400}[period.strip()[0]]


CACHE_OUTAGE_LOG_EVERY_S = 60.0
CACHE_OUTAGE_SKIP_S = 5.0  # after a failure, the throttles leave the cache alone this long (a hanging one costs once)
_cache_outage = {"logged_at": None, "uncounted": 0, "until": 0.0}
_cache_outage_lock = threading.Lock()


def cache_outage_now() -> bool:
    """Whether a throttle cache failure within the last ``CACHE_OUTAGE_SKIP_S`` seconds says not to ask it now."""
    return time.monotonic() < _cache_outage["until"]


def cache_outage_forget() -> None:
    """Forget a throttle cache failure seen (tests: one test's outage must not leave the next test's limits off)."""
    with _cache_outage_lock:
        _cache_outage.update(logged_at=None, uncounted=0, until=0.0)


def cache_outage_note(what: str, exc: Exception) -> None:
    """Log that the throttle cache failed (``what`` went uncounted): the first time, then at most once every
    ``CACHE_OUTAGE_LOG_EVERY_S`` per process with the number of requests served uncounted meanwhile, so an outage
    does not write a line per request."""
    now = time.monotonic()
    with _cache_outage_lock:
        _cache_outage["until"] = now + CACHE_OUTAGE_SKIP_S
        _cache_outage["uncounted"] += 1
        last = _cache_outage["logged_at"]
        if last is not None and now - last < CACHE_OUTAGE_LOG_EVERY_S:
            return
        uncounted, _cache_outage["uncounted"], _cache_outage["logged_at"] = _cache_outage["uncounted"], 0, now
    logger.warning(
        "throttle cache unavailable (%s: %s): %s not counted, served without a limit (%d request(s) since the last such warning)",
        exc.__class__.__name__,
        exc,
        what,
        uncounted,
    )


def _count(bucket: str, period: int, store=cache) -> int:
    """One more in ``bucket`` (kept ``period`` seconds from its first): atomic where the cache is (Redis, and the
    in-process cache under its lock)."""
    if store.add(bucket, 1, period):
        return 1
    try:
        return store.incr(bucket)
    except ValueError:  # expired between add and incr
        store.set(bucket, 1, period)
        return 1


_PREFIX_RE = re.compile(r"^alg_([0-9a-f]{8})_")


def _failure_buckets(request, raw_key: str | None) -> list[str]:
    buckets = [f"auth-fail:ip:{client_ip(request)}"]
    match = _PREFIX_RE.match(raw_key or "")
    buckets.append(f"auth-fail:prefix:{match.group(1) if match else 'malformed'}")
    return buckets


def authentication_fail(request, message: str, buckets: list[str]):
    """Count the failure in each bucket; 429 once any is over the limit (``auth_failures``), else 401."""
    limit, period = _failure_limit()
    over = False
    try:
        for bucket in buckets if not cache_outage_now() else ():
            over = _count(bucket, period) > limit or over
    except Exception as exc:  # any cache backend's failure: answer 401 uncounted rather than 500
        cache_outage_note("a failed authentication", exc)
    logger.info("failed API authentication from %s", client_ip(request))
    if over:
        raise exceptions.Throttled(wait=period, detail="Too many failed authentications; wait and retry.")
    raise exceptions.AuthenticationFailed(message)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if parts and parts[0].lower() == ReviewerTokenAuthentication.keyword.lower():
            return None  # a reviewer's token: the next authenticator checks it
        if len(parts) != 2 or parts[0].lower() != self.keyword.lower():
            self._fail(request, None, "Authorization header must be 'Bearer <key>'.")
        key = _active_key(hash_key(parts[1]))
        if key is None:
            self._fail(request, parts[1], "Invalid or revoked API key.")
        now = timezone.now()
        if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S:
            _last_used_note(key, now)
        tenant_enter([key.agent.tenant_id], agent=key.agent)
        return key.agent, key

    def _fail(self, request, raw_key: str | None, message: str):
        """Count the failure per address and per presented prefix; 429 once either is over the limit."""
        authentication_fail(request, message, _failure_buckets(request, raw_key))

    def authenticate_header(self, request):
        return self.keyword


def _last_used_note(key: ApiKey, now) -> None:
    """Stamp the key's ``last_used_at``, unless another request holds its row (stamping it now, in a transaction
    that lasts as long as that request): the requests of one key never queue behind each other for it. The lock is
    the one an UPDATE of a column that is no key takes (FOR NO KEY UPDATE): a FOR UPDATE would also stop, until
    this request ends, the commit of any other that wrote a row referring to the key (its foreign-key check)."""
    table = ApiKey._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_used_at = %s WHERE id = (SELECT id FROM {table} WHERE id = %s FOR NO KEY UPDATE SKIP LOCKED)",
            [now, key.pk],
        )
    key.last_used_at = now


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


class ReviewerTokenAuthentication(authentication.TokenAuthentication):
    """A human reviewer's personal token: ``Authorization: Token <key>`` (DRF's token, one per user, revocable
    and listed in the admin). The request sees the reviewer's tenants; decisions record the user. A wrong token
    counts against the client address's failed-authentication budget, as a wrong agent key does (a token has no
    prefix to count apart: one client's guesses never lock out another's)."""

    def authenticate(self, request):
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            authentication_fail(request, str(exc.detail), [f"auth-fail:ip:{client_ip(request)}"])

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        tenant_enter(user_tenant_ids(user))
        return user, token


class ScopePermission:
    """DRF permission for agent keys and reviewer tokens.

    An agent key must carry every scope the view names in ``required_scopes``; a view with
    ``human_only = True`` refuses every agent key. A reviewer token is accepted only by views that name
    ``reviewer_permissions``, and only for a user who holds them all.
    """

    message = "This API key lacks the scope this endpoint needs."

    def has_permission(self, request, view):
        key = request.auth
        if isinstance(key, Token):
            needed = getattr(view, "reviewer_permissions", None)
            if not needed:
                self.message = "This endpoint is for agent keys, not reviewer tokens."
                return False
            if not request.user.has_perms(needed):
                self.message = f"This reviewer lacks the permission: {', '.join(needed)}."
                return False
            return True
        if not isinstance(key, ApiKey):
            return False
        if getattr(view, "human_only", False):
            needed = ", ".join(getattr(view, "reviewer_permissions", []))
            self.message = (
                "Only a human reviewer decides this: send a reviewer token (Authorization: Token <key>) "
                f"of a user with the permission {needed}; agent keys never can."
            )
            return False
        missing = [s for s in getattr(view, "required_scopes", []) if not key.has_scope(s)]
        if missing:
            self.message = f"This API key lacks the scope: {', '.join(missing)}."
            return False
        return True

    def has_object_permission(self, request, view, obj):
        return True


class ReviewerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agents.authentication.ReviewerTokenAuthentication"
    name = "ReviewerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A human reviewer's token: `Authorization: Token <key>`",
        }


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Describes API key authentication in the OpenAPI schema."""

    target_class = "agents.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Agent API key: `Authorization: Bearer <key>`"}


class ApiKeyRateThrottle(throttling.SimpleRateThrottle):
    """Requests per API key (``API_KEY_RATE``, e.g. ``1200/min``; empty: no limit), and per reviewer token at the same
    rate; 429 with Retry-After past it."""

    scope = "api_key"

    def get_rate(self):
        return settings.API_KEY_RATE or None

    def allow_request(self, request, view):
        """Counted in fixed windows of the rate's period, one atomic increment each (``cache.add`` then
        ``cache.incr``): DRF's own history list is read and written back, so requests arriving together each
        counted from the same history and all went through (with Redis behind CACHE_URL, far past the rate)."""
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None or cache_outage_now():  # the cache failed a moment ago: not asked again yet
            return True
        now = self.timer()
        window = int(now // self.duration)
        self._wait = (window + 1) * self.duration - now
        try:
            return _count(f"{key}:{window}", self.duration, self.cache) <= self.num_requests
        except Exception as exc:  # any cache backend's failure: serve the request uncounted rather than answer 500
            cache_outage_note("a request", exc)
            return True

    def wait(self):
        return self._wait

    def get_cache_key(self, request, view):
        if isinstance(request.auth, Token):
            return self.cache_format % {"scope": "reviewer_token", "ident": request.auth.user_id}
        if not isinstance(request.auth, ApiKey):
            return None  # unauthenticated requests are refused (or counted as failures) before this
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
