"""Health endpoints for load balancers and orchestrators, answered before any other middleware.

``GET /healthz`` (liveness): the process answers; nothing else is asked, so a slow database never gets a live
process restarted. ``GET /readyz`` (readiness): the process can serve the API: the database answers, every
migration is applied, and the embedder is loaded (the first probe loads it, so traffic arrives warm). 200 with
each check, or 503 naming the one that failed. Both answer whatever the Host header (probes use the pod's
address, which ``ALLOWED_HOSTS`` rarely lists), take no authentication and reveal no data: only check names and
error classes.
"""

import logging
import threading

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse

from embeddings.embedders import EmbeddingError, get_embedder

logger = logging.getLogger(__name__)

LIVE_PATH, READY_PATH = "/healthz", "/readyz"
_migrated = threading.Event()  # once every migration is applied it stays so for this process


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
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


def readiness() -> tuple[bool, dict]:
    """Run the checks in order; the first that fails stops the rest (they need what it checks)."""
    results: dict[str, str] = {}
    for name, check in CHECKS:
        try:
            results[name] = check()
        except (DatabaseError, EmbeddingError, RuntimeError) as exc:
            results[name] = f"failed: {exc if isinstance(exc, RuntimeError) else exc.__class__.__name__}"
            logger.warning("readiness: %s failed: %s", name, exc)
            if isinstance(exc, DatabaseError):
                connection.close()  # a broken connection must not serve the next probe
            return False, results
    return True, results


class HealthMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in ("GET", "HEAD") or request.path not in (LIVE_PATH, READY_PATH):
            return self.get_response(request)
        if request.path == LIVE_PATH:
            return JsonResponse({"status": "ok"})
        ready, checks = readiness()
        return JsonResponse({"status": "ready" if ready else "not ready", "checks": checks}, status=200 if ready else 503)
