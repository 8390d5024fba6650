"""The memory_embed task on a real Celery worker (separate process, Redis broker)."""

import os
import subprocess
import tempfile
import time
import uuid

import pytest

from memories.models import Memory
from tests.conftest import REDIS_URL, celery_worker_start, make_memory, process_env, redis_required


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_embeds_new_memories():
    from celery import Celery

    redis_required()
    rows = [
        make_memory(user="worker", content="Rotate the application logs with logrotate every night."),
        make_memory(user="worker", content="Use UTC for every timestamp stored in the database."),
    ]
    assert all(r.embedding is None for r in rows)
    queue = f"memory-test-{uuid.uuid4().hex[:8]}"
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    worker = celery_worker_start(queue=queue, name=queue, env=process_env(), log=log)
    client = Celery("memory-test", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
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
