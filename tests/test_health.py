"""/healthz and /readyz: what a load balancer or an orchestrator's probes ask, answered whatever the Host header."""

import time

import pytest
from django.db import OperationalError, connection
from django.db.migrations.executor import MigrationExecutor

from config import health
from embeddings.embedders import EmbeddingError

pytestmark = pytest.mark.django_db

POD = {"HTTP_HOST": "10.42.0.17:8000"}  # a probe's Host: the pod's address, not in ALLOWED_HOSTS


def test_liveness_answers_without_the_database_or_an_allowed_host(client):
    def refuse(*args, **kwargs):
        raise AssertionError("liveness must not touch the database")

    with connection.execute_wrapper(refuse):
        answer = client.get("/healthz", **POD)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
    assert client.get("/api/v1/actions", **POD).status_code == 400  # any other path still checks the Host


def test_readiness_checks_the_database_the_migrations_and_the_embedder(client):
    answer = client.get("/readyz", **POD)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["status"] == "ready"
    assert body["checks"]["database"] == "ok" and body["checks"]["migrations"] == "ok"
    assert body["checks"]["embedder"].startswith("all-MiniLM-L6-v2")


def test_readiness_is_503_while_a_migration_is_not_applied(client, monkeypatch):
    monkeypatch.setattr(health, "_migrated", type(health._migrated)())  # this process has not seen them applied
    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [("learning.9999_next", False)])
    answer = client.get("/readyz", **POD)
    assert answer.status_code == 503
    assert answer.json() == {
        "status": "not ready",
        "checks": {"database": "ok", "migrations": "failed: 1 migration(s) not applied"},
    }


def test_readiness_is_503_when_the_database_does_not_answer(client):
    def unreachable(execute, sql, params, many, context):
        raise OperationalError("connection refused")

    with connection.execute_wrapper(unreachable):
        answer = client.get("/readyz", **POD)
    assert answer.status_code == 503
    assert answer.json()["checks"] == {"database": "failed: OperationalError"}  # no address, no message


def test_readiness_is_503_when_the_embedder_cannot_load(client, monkeypatch):
    def cannot_load():
        raise EmbeddingError("cannot load embedder: model file missing")

    monkeypatch.setattr(health, "get_embedder", cannot_load)
    answer = client.get("/readyz", **POD)
    assert answer.status_code == 503 and answer.json()["checks"]["embedder"] == "failed: EmbeddingError"


def test_only_get_and_head_are_probes(client):
    assert client.head("/readyz", **POD).status_code == 200
    assert client.post("/healthz").status_code == 404  # not a probe: the normal routing, which has no such page


class _Unreachable:
    in_process = False
    model_name = "text-embedding-3-small"

    def __init__(self):
        self.calls = 0
        self.inner = self

    def embed_batch(self, texts, *, timeout=None):
        self.calls += 1
        raise ConnectionError("connection refused")


@pytest.fixture
def fresh_probes(monkeypatch):
    monkeypatch.setattr(health, "_probed", {})


def test_a_remote_embedder_that_does_not_answer_is_reported_degraded_not_unready(client, monkeypatch, fresh_probes):
    remote = _Unreachable()
    monkeypatch.setattr(health, "get_embedder", lambda: remote)
    for _ in range(3):
        answer = client.get("/readyz", **POD)
        assert answer.status_code == 200, answer.content  # resolve still answers from its text tiers
        body = answer.json()
        assert body["degraded"] == ["embedding_server"]
        assert body["checks"]["embedding_server"] == "unreachable: ConnectionError"
    assert remote.calls == 1  # probed at most every PROBE_EVERY_S, so probes stay cheap


def test_a_cache_that_does_not_answer_is_reported_degraded(client, monkeypatch, settings, fresh_probes):
    class Down:
        def get(self, key):
            raise ConnectionError("Error 111 connecting to 127.0.0.1:1")

    settings.CACHE_URL = "redis://127.0.0.1:1/1"
    monkeypatch.setattr(health, "cache", Down())
    body = client.get("/readyz", **POD).json()
    assert (
        body["status"] == "ready" and body["degraded"] == ["cache"] and body["checks"]["cache"] == "unreachable: ConnectionError"
    )


def test_a_check_failing_in_an_unexpected_way_is_503_by_its_class_never_500(client, monkeypatch):
    def broken_pool():
        raise ValueError("min_size cannot be negative")

    monkeypatch.setattr(health, "CHECKS", (("database", broken_pool),))
    answer = client.get("/readyz", **POD)
    assert answer.status_code == 503 and answer.json()["checks"] == {"database": "failed: ValueError"}


def test_a_role_that_bypasses_row_level_security_is_not_ready(client, settings, monkeypatch):
    from django.db.backends.utils import CursorWrapper

    from config import health

    health._role_checked.clear()
    real = CursorWrapper.execute

    def execute(self, sql, params=None):
        if "rolbypassrls" in sql:  # as the server answers for a superuser
            return real(self, "SELECT 'postgres', true", None)
        return real(self, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", execute)
    answer = client.get("/readyz", **POD)
    assert answer.status_code == 503 and "superuser or BYPASSRLS" in answer.json()["checks"]["database"]
    settings.DB_ALLOW_RLS_BYPASS = True
    assert client.get("/readyz", **POD).status_code == 200
    health._role_checked.clear()


def test_a_broker_that_does_not_answer_is_reported_degraded(client, settings):
    from config import health

    settings.CELERY_BROKER_URL, settings.CELERY_TASK_ALWAYS_EAGER = "redis://127.0.0.1:1/0", False
    health._probed.pop("broker", None)
    started = time.monotonic()
    try:
        body = client.get("/readyz", **POD).json()
    finally:
        health._probed.pop("broker", None)
    assert "broker" in body["degraded"] and body["checks"]["broker"].startswith("unreachable")
    assert time.monotonic() - started < 1.0  # one try, no retry after kombu's 2 s: within a probe's usual timeout
