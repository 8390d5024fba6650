"""Writes never wait on the embedder: an OpenAI-compatible server on 127.0.0.1 that accepts and never answers.
Each write answers within the request's embedding budget + 1 s, stores its row without a vector, and says so
(X-Embedding-Pending: 1); the backfill fills the vector once the embedder is back."""

import socket
import threading
import time

import pytest

from embeddings.embedders import get_embedder, set_embedder
from learning.models import LearnedPhrase, PhraseBlock
from memories.models import Memory

BUDGET = 1.0


@pytest.fixture
def silent_embedder(settings):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)  # accepted, never answered
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_MODEL = "text-embedding-3-small"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    settings.OPENAI_API_KEY = "test"
    settings.EMBEDDING_TIMEOUT_S = 10.0
    settings.EMBEDDING_MAX_RETRIES = 3  # what the backfill would use; a request path never retries
    settings.EMBEDDING_REQUEST_BUDGET_S = BUDGET
    set_embedder(None)
    get_embedder()  # built once per process (importing the client is not waiting on the embedder)
    yield held  # the connections the embedder's clients opened (one per call that waited)
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()
    set_embedder(None)


def _timed(call):
    start = time.monotonic()
    response = call()
    return response, time.monotonic() - start


def _check(response, elapsed):
    assert response.status_code in (200, 201), response.content[:300]
    assert elapsed < BUDGET + 1.0, f"{elapsed:.2f}s"
    assert response["X-Embedding-Pending"] == "1"


def test_writes_answer_within_budget_and_store_rows_without_vectors(gov_api, catalogue, silent_embedder):
    r, t = _timed(
        lambda: gov_api.post(
            "/api/v1/resolutions/confirm", {"text": "show me every cbu", "verb": "cbu.list", "user_id": "u1"}, format="json"
        )
    )
    _check(r, t)
    row = LearnedPhrase.objects.get(normalized="show me every cbu", user_id="u1")
    assert row.embedding is None

    body = {"text": "wipe the unit", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "u1"}
    r, t = _timed(lambda: gov_api.post("/api/v1/resolutions/correct", body, format="json"))
    _check(r, t)
    assert LearnedPhrase.objects.get(normalized="wipe the unit", user_id="u1").embedding is None

    r, t = _timed(lambda: gov_api.post("/api/v1/blocklist", {"phrase": "nuke everything", "verb": "cbu.delete"}, format="json"))
    _check(r, t)
    assert PhraseBlock.objects.filter(verb__name="cbu.delete").exists()

    content = "phrase,verb\nlist the units please,cbu.list\nmake a fresh unit,cbu.create\n"
    r, t = _timed(lambda: gov_api.post("/api/v1/learning/import", {"format": "csv", "content": content}, format="json"))
    _check(r, t)
    assert r.json()["unembedded"] >= 1
    assert LearnedPhrase.objects.filter(normalized="make a fresh unit").exists()

    observe = {
        "user_id": "u1",
        "user_message": "How should I restart the report worker safely?",
        "assistant_message": "Drain the queue first, then restart the report worker with the supervisor so no job is lost.",
    }
    r, t = _timed(lambda: gov_api.post("/api/v1/memories/observe", observe, format="json"))
    assert r.status_code == 200 and t < BUDGET + 1.0, (r.content[:300], t)
    assert Memory.objects.filter(user_id="u1").exists()


def test_the_budget_is_for_the_whole_request(gov_api, catalogue, silent_embedder, settings):
    settings.LEARNING_IMPORT_BATCH_SIZE = 100  # six batches: only the first may wait

    def rows(kind):
        return "phrase,verb\n" + "".join(f"list {kind} units variant {i},cbu.list\n" for i in range(600))

    settings.EMBEDDING_REQUEST_BUDGET_S = 0.5
    asked = len(silent_embedder)
    r, _ = _timed(lambda: gov_api.post("/api/v1/learning/import", {"format": "csv", "content": rows("b")}, format="json"))
    assert r.status_code == 200 and r.json()["unembedded"] == 600
    # only the first batch asked the embedder and waited; the other five found the budget spent and asked nothing
    # (a budget per batch would have asked six times, waiting 3 s)
    deadline = time.monotonic() + 2.0
    while len(silent_embedder) - asked < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the fixture's thread accepts the connection
    assert len(silent_embedder) - asked == 1


def test_an_mcp_call_has_the_same_budget_and_says_what_waits(catalogue, silent_embedder):
    """A tool call is an agent's request like a REST one: it waits at most the budget and stores the row without its
    vector, and the outcome says so."""
    from agents.models import Scope
    from tests.conftest import make_client
    from tests.test_mcp_policies import mcp_call

    key = make_client([Scope.RESOLVE, Scope.FEEDBACK]).raw
    outcome, elapsed = _timed(
        lambda: mcp_call("confirm_resolution", key, {"text": "show me all the cbus", "verb": "cbu.list", "user_id": "u2"})
    )
    assert outcome.error is None, outcome.error
    assert elapsed < BUDGET + 1.0, f"{elapsed:.2f}s"
    assert outcome.embedding_pending is True
    assert LearnedPhrase.objects.get(normalized="show me all the cbus", user_id="u2").embedding is None


@pytest.mark.django_db(transaction=True)
def test_the_tool_result_carries_embedding_pending_in_its_meta(catalogue, silent_embedder, settings, monkeypatch):
    """Through the MCP server itself (the SDK's in-process client): MCP has no response header, so ``_meta`` says it."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections
    from mcp import Client

    from agents.models import Scope
    from mcp_server import server as mcp_server
    from tests.conftest import make_client

    pools = []

    class Pool(ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

    monkeypatch.setattr(mcp_server, "ThreadPoolExecutor", Pool)
    key = make_client([Scope.RESOLVE, Scope.FEEDBACK]).raw
    server = mcp_server.build_server(lambda ctx: (f"Bearer {key}", "test"), threads=1)

    async def confirm(text: str):
        async with Client(server) as client:
            return await client.call_tool("confirm_resolution", {"text": text, "verb": "cbu.list", "user_id": "u3"})

    try:
        waited = asyncio.run(confirm("list every single cbu"))
        assert not waited.is_error and waited.meta["embedding_pending"] is True
        settings.EMBEDDING_BACKEND = "local"
        set_embedder(None)
        ready = asyncio.run(confirm("list each cbu we have"))
        assert not ready.is_error and "embedding_pending" not in (ready.meta or {})
    finally:
        for pool in pools:  # the worker thread's database connection, so the test database can be dropped
            pool.submit(connections.close_all).result()
            pool.shutdown()
