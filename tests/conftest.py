"""Shared fixtures and helpers. Tests run on PostgreSQL + pgvector (embedded unless DATABASE_URL is set) with the real local model."""

import os
from contextlib import contextmanager

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Agent, Scope
from agents.services import agent_key_create
from common.text import text_hash
from embeddings.embedders import EmbeddingError, get_embedder, set_embedder
from feedback.models import Execution, Proposal
from feedback.services.reviews import Reviewer, proposal_create, proposal_modify, proposal_reject
from learning.catalogue import VerbEntry
from learning.services.catalogue import verb_catalogue_load
from memories.models import Memory, MemoryQuarantine
from memories.services import memories_embed
from memories.simhash import simhash_hex
from tenants.selectors import tenant_default
from tenants.services import membership_add

CATALOGUE = [
    VerbEntry("cbu.list", "cbu", "List CBUs", "List client business units.", ["list all cbus", "show my client business units"]),
    VerbEntry(
        "cbu.create",
        "cbu",
        "Create a CBU",
        "Open a new client business unit.",
        ["create a cbu", "open a new client business unit"],
    ),
    VerbEntry(
        "cbu.delete", "cbu", "Delete a CBU", "Remove a client business unit.", ["delete a cbu", "remove a client business unit"]
    ),
    VerbEntry("document.search", "document", "Search documents", "Find documents.", ["search documents", "find a document"]),
    VerbEntry("email.send", "email", "Send an email", "Send an email.", ["send an email", "email my manager"]),
]


@pytest.fixture(autouse=True)
def _fresh_verb_details():
    """Each test starts without the per-process verb details cache and what it saw of other embedding models' rows
    (tests roll the catalogue back)."""
    from embeddings.selectors import other_model_rows_forget
    from learning.selectors import verb_details_forget

    verb_details_forget()
    other_model_rows_forget()


@pytest.fixture(autouse=True)
def _fresh_decision_cache():
    """Each test starts and ends without the per-process decision fits and heads (tests roll their fits back)."""
    from learning.selectors import decision_cache_clear

    decision_cache_clear()
    yield
    decision_cache_clear()


@pytest.fixture(autouse=True)
def _fresh_django_cache():
    """Each test starts with an empty Django cache (rate-limit buckets, a failed prior fit remembered), asked again
    (a cache failure an earlier test caused leaves the throttles off for a few seconds in its process)."""
    from django.core.cache import cache

    from agents.authentication import cache_outage_forget

    cache.clear()
    cache_outage_forget()


# Longer than any test that asks for ``one_day`` takes (a browser test deciding a handful of items included).
ONE_DAY_MARGIN_S = 120


@pytest.fixture
def one_day():
    """For a test that writes rows stamped now and then counts "today" or "this week" (or takes the day's snapshot
    twice): started in the last ``ONE_DAY_MARGIN_S`` seconds of a day (TIME_ZONE), it first waits for the next, so
    midnight never falls between its writes and its reads."""
    import time
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.localtime()
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    left = (midnight - now).total_seconds()
    if left < ONE_DAY_MARGIN_S:
        time.sleep(left + 0.1)


@pytest.fixture
def catalogue(db):
    verb_catalogue_load(entries=CATALOGUE)
    from learning.models import Verb

    return {v.name: v for v in Verb.objects.all()}


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks):
    """Run on-commit callbacks (the eager Celery task) inside the test transaction."""

    def _call(fn, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return _call


def make_client(scopes, name="agent-a", tenant=None):
    key, raw = agent_key_create(agent_name=name, scopes=scopes, tenant=tenant)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.agent = key.agent
    client.key = key
    client.raw = raw
    return client


@pytest.fixture
def api(db):
    """An agent key with the default scopes (resolve, feedback)."""
    return make_client([Scope.RESOLVE, Scope.FEEDBACK])


@pytest.fixture
def agent(db):
    """An agent without a key, for services called directly."""
    return Agent.objects.create(name="mailer")


@pytest.fixture
def gov_api(db):
    """A key with every scope, governance included."""
    return make_client([s.value for s in Scope], name="reviewer-tool")


class FailingEmbedder:
    model_name = "all-MiniLM-L6-v2-onnx-int8"
    dimension = 384

    def embed(self, text):
        raise EmbeddingError("embedder down (test)")

    def embed_batch(self, texts):
        raise EmbeddingError("embedder down (test)")


@pytest.fixture
def failing_embedder():
    set_embedder(FailingEmbedder())
    yield
    set_embedder(None)


@pytest.fixture
def embed():
    def _embed(text: str) -> np.ndarray:
        from common.text import normalize_phrase

        return get_embedder().embed(normalize_phrase(text))

    return _embed


# --- learning: the disambiguation catalogue ----------------------------------------

# "list all cbus" is NOT a catalogue phrase here, so it comes back ambiguous.
CBU_CATALOGUE = [
    VerbEntry(
        "cbu.list", "cbu", "List CBUs", "List client business units.", ["cbu overview", "which client business units do I have"]
    ),
    VerbEntry(
        "cbu.create",
        "cbu",
        "Create a CBU",
        "Open a new client business unit.",
        ["create a cbu", "open a new client business unit"],
    ),
    VerbEntry(
        "cbu.delete", "cbu", "Delete a CBU", "Remove a client business unit.", ["delete a cbu", "remove a client business unit"]
    ),
    VerbEntry("cbu.show", "cbu", "Show a CBU", "Show one client business unit.", ["show cbu details", "open the cbu record"]),
    VerbEntry("document.search", "document", "Search documents", "Find documents.", ["search documents", "find a document"]),
    VerbEntry("email.send", "email", "Send an email", "Send an email.", ["send an email", "email my manager"]),
]

# A smaller CBU catalogue: list, show and delete.
CBU_VERBS = [
    VerbEntry(
        "cbu.list", "cbu", "List CBUs", "List client business units.", ["cbu overview", "which client business units do I have"]
    ),
    VerbEntry("cbu.show", "cbu", "Show a CBU", "Show one client business unit.", ["show cbu details", "open the cbu record"]),
    VerbEntry(
        "cbu.delete", "cbu", "Delete a CBU", "Remove a client business unit.", ["delete a cbu", "remove a client business unit"]
    ),
]


@pytest.fixture
def cbus(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)


# The retrieval floors some tests were written for. A deployment measures its own from its phrases when its
# catalogue prior is fitted; a catalogue this small has none, so the seed values would apply.
WRITTEN_FOR_FLOORS = {
    "learned_threshold": 0.50,
    "min_score": 0.30,
    "blocklist_threshold": 0.73,
    "correction_decay_threshold": 0.85,
}


@pytest.fixture
def written_for_floors(settings):
    settings.RESOLUTION_OVERRIDES = {**settings.RESOLUTION_OVERRIDES, **WRITTEN_FOR_FLOORS}


# --- feedback: proposals and executions ----------------------------------------------

REVIEWER = Reviewer(source="command")


def make_proposal(agent, action="email.send", confidence=0.9, **body):
    return proposal_create(
        agent=agent, action=action, proposed_action=body or {"to": "ceo@example.com"}, reasoning={"confidence": confidence}
    )


def reject_n(agent, n, action="email.send", notes="never email the CEO", category="", corrected=None):
    """Reject n new proposals of the agent (or, with corrected, modify them): n mistakes of one kind."""
    for _ in range(n):
        p = make_proposal(agent, action=action)
        if corrected:
            proposal_modify(proposal=p, reviewer=REVIEWER, modified_action=corrected, notes=notes, mistake_category=category)
        else:
            proposal_reject(proposal=p, reviewer=REVIEWER, notes=notes, mistake_category=category)


def fill_history(action, agent, completed=0, rejected=0, modified_completed=0, exec_ok=0, exec_bad=0):
    """Bulk-create the agent's finished proposals and executions of one action (the evidence for autonomy)."""
    P = Proposal
    rows = [
        P(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=0.9, status="completed")
        for _ in range(completed)
    ]
    rows += [
        P(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=0.9, status="rejected")
        for _ in range(rejected)
    ]
    rows += [
        P(
            agent=agent,
            action=action,
            proposed_action={},
            reasoning={},
            confidence=0.9,
            status="completed",
            modified_action={"x": 1},
        )
        for _ in range(modified_completed)
    ]
    P.objects.bulk_create(rows)
    Execution.objects.bulk_create(
        [Execution(agent=agent, action=action, confidence=0.9, success=True) for _ in range(exec_ok)]
        + [
            Execution(agent=agent, action=action, confidence=0.9, success=True, review_outcome="incorrect")
            for _ in range(exec_bad)
        ]
    )


# --- memories -------------------------------------------------------------------------

OBSERVE = "/api/v1/memories/observe"
RETRIEVE = "/api/v1/memories/retrieve"
OUTCOME = "/api/v1/memories/outcome"
SEARCH = "/api/v1/memories/search"

LOG_LESSONS = [
    "Rotate the application logs with logrotate every night and keep fourteen compressed copies.",
    "Application log files are rotated by logrotate; the config lives in the etc logrotate directory.",
    "When logs fill the disk, check that logrotate ran and that the app reopened its log file.",
    "Ship application logs to the central log server over TLS using the rsyslog forwarder.",
    "Log rotation for nginx is handled by its own logrotate snippet, not by the app.",
    "Keep debug logging off in production, it fills the log volume in hours.",
    "Use structured JSON logs so the log pipeline can index request ids.",
    "Archive rotated logs older than thirty days to cold storage.",
]


def observe_blocked(answer: str, secret: str) -> None:
    """An observe whose answer holds ``secret``: quarantined as a secret, the secret in neither the answer, a memory
    nor the quarantine's preview."""
    client = make_client(["resolve", "feedback"], name="obs")
    r = client.post(
        OBSERVE, {"user_id": "alice", "user_message": "Please remember this.", "assistant_message": answer}, format="json"
    )
    body = r.json()
    assert r.status_code == 200 and body["decision"] == "blocked", body
    assert body["evidence"]["reason"] == "secret"
    assert secret not in r.content.decode()
    assert not any(secret in s for s in Memory.objects.values_list("content", flat=True))
    item = MemoryQuarantine.objects.get(user_id="alice")
    assert secret not in item.redacted_preview and "[REDACTED:" in item.redacted_preview
    assert item.reason == "secret"


def make_memory(user="alice", content="Always run the database migrations before deploying the web application.", **kw):
    defaults = dict(
        user_id=user,
        content=content,
        memory_type="pattern",
        topic=kw.pop("topic", "deploy"),
        simhash=simhash_hex(content),
        content_sha256=text_hash(content),
    )
    defaults.update(kw)
    return Memory.objects.create(**defaults)


def seed_memories(user="alice", texts=LOG_LESSONS, status="candidate", **kw):
    """Save the texts as the user's memories, with embeddings."""
    rows = [make_memory(user=user, content=t, status=status, topic=f"logs {i}", **kw) for i, t in enumerate(texts)]
    memories_embed(memory_ids=[r.pk for r in rows])
    return rows


# --- a real browser (headless Chromium through Playwright) ---------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser_page(monkeypatch):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM reads are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # The live server answers each request on a new thread: close its connection when the request ends.
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(20_000)
        yield page
        browser.close()
        # ORM calls made while Playwright's loop runs may have opened a connection in another context: close it.
        connections.close_all()
    connections.close_all()


def reviewer_user(name, *codenames, superuser=False, **fields):
    """A staff user with these permissions, member of the default tenant (reviewers see only their tenants)."""
    user = get_user_model().objects.create_user(
        name, password=fields.pop("password", "pw-1234-xyz"), is_staff=True, is_superuser=superuser, **fields
    )
    if codenames:
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    membership_add(user=user, tenant=tenant_default())
    return user


@pytest.fixture
def su(db):
    """The admin signed in as a superuser; a server error is answered as a page (500), not raised."""
    from django.test import Client

    client = Client(raise_request_exception=False)
    client.force_login(reviewer_user("root", superuser=True))
    return client


def reviewer_client(user):
    """An API client with the reviewer's personal token (``Authorization: Token <key>``)."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    client.user = user
    return client


# --- real Celery workers (Redis broker), for the tests that need separate processes -------------------------

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDIS_URL = os.environ.get("CELERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


def redis_required() -> None:
    """Fail (never skip) when the broker these tests need is not there."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}); this test needs a real broker and must not be skipped.")


def process_env(**extra) -> dict:
    """The environment of a worker or app process on this test's database and the test broker."""
    from urllib.parse import urlparse, urlunparse

    from django.db import connection

    db_name = connection.settings_dict["NAME"]
    env = dict(
        os.environ,
        CELERY_BROKER_URL=REDIS_URL,
        CELERY_RESULT_BACKEND=REDIS_URL,
        CELERY_TASK_ALWAYS_EAGER="0",
        EMBEDDED_DB_NAME=db_name,
        DJANGO_SETTINGS_MODULE="config.settings",
        LOG_LEVEL="INFO",
        **extra,
    )
    if os.environ.get("DATABASE_URL"):  # the test database on the same server
        u = urlparse(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunparse(u._replace(path="/" + db_name))
    return env


def celery_worker_start(*, queue: str, name: str, env: dict, log):
    """A real worker process (solo pool) reading ``queue``, its output in ``log``."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "-Q", queue, "-n", f"{name}@%h"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=INFO"]
    return subprocess.Popen(argv, cwd=ROOT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextmanager
def asgi_server(env: dict):
    """uvicorn serving config.asgi (Django + /mcp) on a free loopback port with ``env``; yields its base URL."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
        + ["--lifespan", "on", "--log-level", "warning", "--no-access-log"],
        cwd=ROOT_DIR,
        env=env,
    )
    try:
        for _ in range(300):  # bounded: 60 s
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "uvicorn exited"
                time.sleep(0.2)
        else:
            pytest.fail("uvicorn did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def advisory_lock_held_elsewhere(namespace: int, key: int = 0):
    """Another connection (another process's job) holds the advisory lock (``namespace``, ``key``) for the block."""
    import threading

    from django.db import connections

    held, release = threading.Event(), threading.Event()

    def holder():
        with connections["default"].cursor() as cur:  # this thread's own connection
            cur.execute("SELECT pg_advisory_lock(%s, %s)", [namespace, key])
            held.set()
            release.wait(30)
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
        connections["default"].close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        yield
    finally:
        release.set()
        thread.join(30)
