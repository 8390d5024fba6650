"""The memory_embed task on a real Celery worker (separate process, Redis broker)."""

import os
import subprocess
import sys
import tempfile
import time
import uuid
from urllib.parse import urlparse, urlunparse

import pytest
from django.db import connection

from memories.models import Memory
from tests.conftest import make_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDIS_URL = os.environ.get("CELERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_embeds_new_memories():
    import redis
    from celery import Celery

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}); this test needs a real broker and must not be skipped.")
    rows = [
        make_memory(user="worker", content="Rotate the application logs with logrotate every night."),
        make_memory(user="worker", content="Use UTC for every timestamp stored in the database."),
    ]
    assert all(r.embedding is None for r in rows)
    db_name = connection.settings_dict["NAME"]
    queue = f"memory-test-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        CELERY_BROKER_URL=REDIS_URL,
        CELERY_RESULT_BACKEND=REDIS_URL,
        EMBEDDED_DB_NAME=db_name,
        DJANGO_SETTINGS_MODULE="config.settings",
        CELERY_TASK_ALWAYS_EAGER="0",
        LOG_LEVEL="INFO",
    )
    if os.environ.get("DATABASE_URL"):
        u = urlparse(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunparse(u._replace(path="/" + db_name))
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "-n",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = Celery("memory-test", broker=REDIS_URL, backend=REDIS_URL)
    try:
        client.send_task("memories.tasks.memory_embed", args=[[r.pk for r in rows]], queue=queue)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not Memory.objects.filter(pk__in=[r.pk for r in rows], embedding__isnull=True).exists():
                break
            time.sleep(0.5)
        else:
            log.seek(0)
            pytest.fail(f"the worker did not embed the memories; its log:\n{log.read()[-4000:]}")
        for r in rows:
            r.refresh_from_db()
            assert r.embedding is not None and r.embedding_model and len(r.embedding_hash) == 64
        assert worker.poll() is None  # a real, separate process
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        client.connection_for_write().default_channel.queue_delete(queue)
        log.close()
        os.unlink(log.name)
