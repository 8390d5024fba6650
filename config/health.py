"""Health endpoints for load balancers and orchestrators, answered before any other middleware.

``GET /healthz`` (liveness): the process answers; nothing else is asked, so a slow database never gets a live
process restarted. ``GET /readyz`` (readiness): the process can serve the API: the database answers, every
migration is applied, and the embedder is loaded (each web process loads it as it starts: learning.preload). 200 with
each check, or 503 naming the one that failed. Both answer whatever the Host header (probes use the pod's
address, which ``ALLOWED_HOSTS`` rarely lists), take no authentication and reveal no data: only check names and
error classes.

What the API can serve without, degraded, is reported but does not make the process unready (every process
shares it, so a 503 would take the whole service down instead of answering degraded): a remote embedding server
that does not answer (probed at most every ``PROBE_EVERY_S``; resolve then answers from its text tiers), and the
cache behind ``CACHE_URL`` (rate limits then stop counting), and the Celery broker (tasks then run inline or wait for
their sweep). They are listed in ``degraded``. A database role that bypasses row-level security (a superuser, or
BYPASSRLS) makes the process unready unless ``DB_ALLOW_RLS_BYPASS`` is set.
"""

import logging
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse

from config.celery import app as celery_app
from embeddings.embedders import EmbeddingError, get_embedder

logger = logging.getLogger(__name__)

LIVE_PATH, READY_PATH = "/healthz", "/readyz"
_migrated = threading.Event()  # once every migration is applied it stays so for this process


_role_checked = threading.Event()  # the role is read once a process: it cannot change under a connection string


def _database() -> str:
    """The database answers, as a role that row-level security applies to: a superuser or a BYPASSRLS role sees
    every tenant's rows, so tenants would not be kept apart (``DB_ALLOW_RLS_BYPASS`` accepts it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
        if not _role_checked.is_set():
            cursor.execute("SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
            role, bypasses = cursor.fetchone() or ("?", False)
            if bypasses and not settings.DB_ALLOW_RLS_BYPASS:
                raise RuntimeError(
                    f"the database role {role} is a superuser or BYPASSRLS: row-level security would not keep tenants "
                    "apart; connect as a role that is neither (docs/tenants.md), or set DB_ALLOW_RLS_BYPASS=1"
                )
            _role_checked.set()
    return "ok"


def _migrations() -> str:
    if not _migrated.is_set():
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            raise RuntimeError(f"{len(pending)} migration(s) not applied")
        _migrated.set()
    return "ok"


def _embedder() -> str:
    return get_embedder().model_name


CHECKS = (("database", _database), ("migrations", _migrations), ("embedder", _embedder))

PROBE_EVERY_S = 30.0
_probed: dict[str, tuple[float, str]] = {}  # what -> (monotonic time of the probe, its answer)
# one probe of each dependency at a time: concurrent readiness calls wait for it and share its answer
_probe_locks: dict[str, threading.Lock] = {}


def _remembered(what: str, probe) -> str:
    now = time.monotonic()
    hit = _probed.get(what)
    if hit is not None and now - hit[0] < PROBE_EVERY_S:
        return hit[1]
    with _probe_locks.setdefault(what, threading.Lock()):
        return _probe_once(what, probe)


def _probe_once(what: str, probe) -> str:
    now = time.monotonic()
    hit = _probed.get(what)  # another thread may have probed while this one waited
    if hit is None or now - hit[0] >= PROBE_EVERY_S:
        try:
            answer = probe()
        except Exception as exc:  # whatever the dependency raises: reported by class, never raised
            logger.warning("readiness: %s degraded: %s: %s", what, exc.__class__.__name__, exc)
            answer = f"unreachable: {exc.__class__.__name__}"
        hit = _probed[what] = (now, answer)
    return hit[1]


def _embedding_server() -> str | None:
    """A remote embedder embeds one short text (not from the cache), bounded by the request timeout."""
    embedder = get_embedder()
    if embedder.in_process:
        return None

    def probe():
        embedder.inner.embed_batch(["readiness probe"], timeout=settings.RESOLVE_EMBED_TIMEOUT_S)
        return "ok"

    return _remembered("embedding_server", probe)


def _cache() -> str | None:
    if not getattr(settings, "CACHE_URL", ""):
        return None  # the process's own memory

    def probe():
        cache.get("readiness-probe")
        return "ok"

    return _remembered("cache", probe)


def _broker() -> str | None:
    """The Celery broker (none set, or tasks run inline: nothing to ask). Down, tasks run inline or wait for their
    sweep (README), so it is reported, not a reason to stop serving."""
    if not settings.CELERY_BROKER_URL or settings.CELERY_TASK_ALWAYS_EAGER:
        return None

    def probe():
        with celery_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
            # one try (kombu waits 2 s before a retry: longer than a probe's usual 1 s timeout)
            conn.ensure_connection(max_retries=0, timeout=settings.CELERY_BROKER_CONNECTION_TIMEOUT)
        return "ok"

    return _remembered("broker", probe)


OPTIONAL = (("embedding_server", _embedding_server), ("cache", _cache), ("broker", _broker))


def readiness() -> tuple[bool, dict, list[str]]:
    """Run the checks in order; the first that fails stops the rest (they need what it checks). Then what the API
    serves degraded without: (ready, checks, the degraded ones)."""
    results: dict[str, str] = {}
    for name, check in CHECKS:
        try:
            results[name] = check()
        except Exception as exc:  # noqa: BLE001 - a check that fails in any way says not ready, by class, never 500
            known = isinstance(exc, RuntimeError) and not isinstance(exc, DatabaseError | EmbeddingError)
            results[name] = f"failed: {exc if known else exc.__class__.__name__}"
            logger.warning("readiness: %s failed: %s: %s", name, exc.__class__.__name__, exc)
            if isinstance(exc, DatabaseError):
                connection.close()  # a broken connection must not serve the next probe
            return False, results, []
    degraded = []
    for name, check in OPTIONAL:
        answer = check()
        if answer is not None:
            results[name] = answer
            if answer != "ok":
                degraded.append(name)
    return True, results, degraded


class HealthMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in ("GET", "HEAD") or request.path not in (LIVE_PATH, READY_PATH):
            return self.get_response(request)
        if request.path == LIVE_PATH:
            return JsonResponse({"status": "ok"})
        ready, checks, degraded = readiness()
        body = {"status": "ready" if ready else "not ready", "checks": checks}
        if degraded:
            body["degraded"] = degraded
        return JsonResponse(body, status=200 if ready else 503)
