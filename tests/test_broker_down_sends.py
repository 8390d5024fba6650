"""With the task broker down, the work a request sends still happens in the request's tenant, or is not claimed.

Each test points the real Celery app (config.celery, with the transport options of config/settings.py) at a broker
that refuses connections (or at the machine's Redis), with eager tasks off, and drives the endpoint or admin action.
A web process's connection sees no tenant outside a request (config/wsgi.py): the headers of a task sent once the
request commits must be those of the request, taken before its scope ends, or the inline run sees no rows.
"""

import json
import uuid
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.utils import timezone

from common import tasks as common_tasks
from config.celery import app as celery_app
from memories.models import Memory, MemoryStatus
from tests.conftest import OBSERVE, REDIS_URL, make_memory, redis_required

pytestmark = pytest.mark.django_db

DOWN = "redis://127.0.0.1:1/0"  # connection refused
UP = REDIS_URL.rsplit("/", 1)[0] + "/15"  # a database of its own on the test Redis, beside the worker tests' queues


def _reset_app_caches():
    celery_app._pool = None
    try:
        celery_app.__dict__["amqp"]._producer_pool = None
    except (AttributeError, KeyError):
        pass
    celery_app._backend_cache = None
    if hasattr(celery_app._local, "backend"):
        del celery_app._local.backend
    common_tasks.broker_down_forget()


@pytest.fixture
def broker(settings):
    """``broker(url)``: the real app sends to ``url`` (not eager), to ``queue`` when given (else the settings'
    default queue); restored afterwards."""
    conf = celery_app.conf
    saved = {k: conf[k] for k in ("broker_url", "result_backend", "task_always_eager", "task_default_queue")}

    def use(url, backend="same", queue=None):
        conf.broker_url = url
        conf.result_backend = url if backend == "same" else backend
        conf.task_always_eager = False
        if queue is not None:
            conf.task_default_queue = queue
            settings.CELERY_TASK_DEFAULT_QUEUE = queue
        settings.CELERY_TASK_ALWAYS_EAGER = False
        settings.CELERY_BROKER_URL = url
        _reset_app_caches()

    yield use
    for k, v in saved.items():
        conf[k] = v
    _reset_app_caches()


def _web_process_scope():
    """A web process's connection sees no tenant outside a request (config/wsgi.py: DB_TENANT_DEFAULT=none).
    Inside the test transaction: the request restores this value when it ends (it is nested)."""
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('app.tenant_ids', 'none', true)")


def _all_tenants_scope():
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('app.tenant_ids', '*', true)")


LESSON_Q = "How do I rotate the application logs on the staging servers?"
LESSON_A = "Run logrotate with the config in /etc/logrotate.d/app and restart the app service afterwards so it reopens its files."


def _observe(api):
    body = {"user_id": "alice", "user_message": LESSON_Q, "assistant_message": LESSON_A}
    return api.post(OBSERVE, body, format="json")


@pytest.mark.parametrize("web_process", [True, False], ids=["web-process-scope-none", "control-scope-all"])
def test_with_the_broker_down_an_observed_memory_is_embedded_inline_in_its_tenant(
    api, broker, django_capture_on_commit_callbacks, web_process
):
    broker(DOWN)
    if web_process:
        _web_process_scope()
    with django_capture_on_commit_callbacks(execute=True):  # in production the callbacks run inside the request
        r = _observe(api)
    assert r.status_code == 200, r.content
    _all_tenants_scope()
    m = Memory.objects.get(pk=r.json()["memory_id"])
    assert m.embedding is not None


def test_a_memory_embedding_sent_to_the_broker_carries_the_requests_tenant_and_agent(
    api, broker, django_capture_on_commit_callbacks
):
    redis_required()
    # A queue of this run's own (its exchange and routing key take its name): another test session on the same
    # Redis (CI and a developer's run at once) sends to, reads and deletes only its own.
    queue = f"broker-down-sends-{uuid.uuid4().hex}"
    r_db = redis.Redis.from_url(UP)
    broker(UP, queue=queue)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            r = _observe(api)
        assert r.status_code == 200, r.content
        raw = r_db.lrange(queue, 0, -1)
        messages = [json.loads(m) for m in raw]
        embeds = [m for m in messages if m["headers"].get("task") == "memories.tasks.memory_embed"]
        assert embeds, messages
        headers = embeds[0]["headers"]
        assert headers.get("alg_tenants") == str(api.agent.tenant_id), headers
        assert headers.get("alg_agent", "").startswith(f"{api.agent.pk}:"), headers
    finally:
        r_db.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


@pytest.mark.parametrize("web_process", [True, False], ids=["web-process-scope-none", "control-scope-all"])
def test_with_the_broker_down_a_paraphrase_observed_next_is_merged_not_stored_twice(
    api, broker, settings, django_capture_on_commit_callbacks, web_process
):
    """The first memory has its vector (embedded inline), so the next observation's semantic dedupe finds it."""
    a = "Always run the database migrations before deploying the web application to production."
    b = "Run the database migrations before you deploy the web application to production, always."
    settings.MEMORY_SEMANTIC_DUPLICATE_THRESHOLD = 0.85
    broker(DOWN)
    if web_process:
        _web_process_scope()

    def observe(text):
        body = {"user_id": "alice", "user_message": "note", "assistant_message": text, "meta": {"type": "pattern"}}
        with django_capture_on_commit_callbacks(execute=True):
            return api.post(OBSERVE, body, format="json").json()

    first, second = observe(a), observe(b)
    assert second["decision"] == "merged" and second["memory_id"] == first["memory_id"], (first, second)


def test_with_the_broker_down_the_admin_purge_is_not_run_inside_the_page_and_says_so(
    su, broker, django_capture_on_commit_callbacks
):
    old = make_memory(content="Deprecated long ago: restart the cache servers on Fridays.")
    Memory.objects.filter(pk=old.pk).update(status=MemoryStatus.DEPRECATED, deprecated_at=timezone.now() - timedelta(days=400))
    keep = make_memory(user="bob", content="Always run the database migrations before deploying the web application.")
    broker(DOWN)
    with django_capture_on_commit_callbacks(execute=True):
        r = su.post(
            "/admin/memories/memory/",
            {"action": "purge_deprecated", "_selected_action": [keep.pk], "days": "30", "index": 0},
            follow=True,
        )
    assert r.status_code == 200
    text = r.content.decode()
    assert "was not sent: the task broker is unavailable" in text and "purge_deprecated_memories --older-than 30d" in text
    assert Memory.objects.filter(pk=old.pk).exists()  # not run inside the request (minutes on a large backlog)


def test_with_the_broker_down_an_import_job_waits_queued_for_the_sweep_not_run_inside_the_request(
    gov_api, catalogue, broker, settings, django_capture_on_commit_callbacks
):
    """An import job may take minutes: the request that made it answers 202 at once and leaves it queued; the sweep
    runs it once it has waited for its task."""
    from learning.models import LearnedPhrase, PhraseImportJob
    from learning.resolution import resolve
    from learning.tasks import phrase_import_jobs_sweep_task

    settings.LEARNING_IMPORT_SYNC_MAX_ROWS = 1
    rows = [{"phrase": "spin up a client unit", "verb": "cbu.create"}, {"phrase": "show every client unit", "verb": "cbu.list"}]
    broker(DOWN)
    with django_capture_on_commit_callbacks(execute=True):
        r = gov_api.post("/api/v1/learning/import", {"format": "json", "content": json.dumps(rows)}, format="json")
    assert r.status_code == 202, r.content
    _all_tenants_scope()
    job = PhraseImportJob.objects.get(pk=r.json()["job"]["id"])
    assert job.status == "queued" and job.started_at is None and len(job.rows) == 2
    assert not LearnedPhrase.objects.exists()

    PhraseImportJob.objects.filter(pk=job.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.LEARNING_IMPORT_JOB_SEND_WAIT_S + 5)
    )
    assert phrase_import_jobs_sweep_task() == {job.pk: "succeeded"}
    assert resolve(text="spin up a client unit").verb == "cbu.create"
