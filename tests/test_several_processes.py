"""Two app processes and two Celery workers on one database and one broker: nothing lost, nothing done twice.

gunicorn serves the app twice (two ports), two workers read one queue of a real Redis broker. Resolves go to
both app processes in turn, each ambiguous answer is selected through the *other* process, confirmations
follow, and the autonomy cycle is queued twice at once (as two beats would). Then: every resolve is stored,
every selection is learned from exactly once, every signal is processed once, and the cycle proposed one
transition however many workers ran it.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from actions.models import Action
from agents.services import agent_key_create
from autonomy.models import AutonomyTransition, Episode
from learning.models import DisambiguationRequest, LearningSignal, ResolutionRecord
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_CATALOGUE, REDIS_URL, ROOT_DIR, celery_worker_start, fill_history, process_env, redis_required

TEXTS = [
    "list all cbus",
    "cbu overview please",
    "show me the client business units",
    "open the unit record",
    "remove that business unit",
    "which units do we have",
    "find the contract document",
    "mail the cfo",
    "cbu details",
    "get rid of the cbu",
    "what client units exist",
    "drop a note to finance",
]


def _free_ports(n: int) -> list[int]:
    """``n`` different free ports: each socket stays bound until all are chosen (one closed before the next bind
    may be handed out again, and the second app process could not listen)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _post(port: int, path: str, key: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data else {}


def _wait_for_port(port: int, proc, log, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"an app process exited early:\n{log.read()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    pytest.fail(f"no app process answered on port {port}")


def _wait_until(predicate, seconds: float, what: str, logs) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = []
    for log in logs:
        log.seek(0)
        tails.append(log.read()[-2000:])
    pytest.fail(f"{what} did not happen in {seconds} s; logs:\n" + "\n---\n".join(tails))


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_two_app_processes_and_two_workers_lose_nothing_and_do_nothing_twice():
    from celery import Celery

    redis_required()
    verb_catalogue_load(entries=CBU_CATALOGUE)
    key, raw = agent_key_create(agent_name="ops", scopes=["resolve", "feedback"])
    send = Action.objects.create(name="email.send", autonomy_level=1)
    fill_history(send, key.agent, completed=25)  # enough success for the cycle to propose a promotion

    queue = f"several-{uuid.uuid4().hex[:8]}"
    env = process_env(
        CELERY_TASK_DEFAULT_QUEUE=queue,
        CELERY_FALLBACK_INLINE="0",
        API_KEY_RATE="100000/min",
    )
    procs, logs = [], []

    def start(argv):
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        procs.append(subprocess.Popen(argv, cwd=ROOT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
        return procs[-1], log

    ports = _free_ports(2)
    try:
        apps = [
            start([sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}", "-w", "1", "--timeout", "120"])
            for port in ports
        ]
        workers = []
        for n in range(2):
            log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
            worker = celery_worker_start(queue=queue, name=f"{queue}-{n}", env=env, log=log)
            procs.append(worker)
            logs.append(log)
            workers.append((worker, log))
        for port, (proc, log) in zip(ports, apps, strict=True):
            _wait_for_port(port, proc, log)

        resolves = selects = confirms = 0
        for i, text in enumerate(TEXTS * 2):
            port, other = ports[i % 2], ports[(i + 1) % 2]
            user = f"user{i % 3}"
            status, body = _post(port, "/api/v1/resolve", raw, {"text": text, "user_id": user})
            assert status == 200, body
            resolves += 1
            if body["outcome"] == "ambiguous":
                chosen = body["options"][0]["verb"]
                status, answer = _post(
                    other,
                    f"/api/v1/disambiguations/{body['request_id']}/select",
                    raw,
                    {"selected_verb": chosen, "user_id": user},
                )
                assert status == 200, answer
                selects += 1
            elif body["outcome"] == "resolved":
                status, answer = _post(
                    other, "/api/v1/resolutions/confirm", raw, {"text": text, "verb": body["verb"], "user_id": user}
                )
                assert status in (200, 201), answer
                confirms += 1
        assert selects > 0 and confirms > 0, (selects, confirms)

        client = Celery("several-test", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
        for _ in range(2):  # two beats at once
            client.send_task("autonomy.cycle_all", kwargs={"trigger": "beat"}, queue=queue)

        def learned_everything():
            selected = DisambiguationRequest.objects.filter(status="selected")
            return (
                selected.count() == selects
                and not selected.filter(processed_at__isnull=True).exists()
                and not LearningSignal.objects.filter(processed_at__isnull=True).exists()
            )

        _wait_until(learned_everything, 120, "learning from every selection", logs)
        _wait_until(lambda: Episode.objects.filter(agent=key.agent).exists(), 120, "an autonomy cycle", logs)
        time.sleep(2)  # let a second cycle, if one runs, finish its writes

        assert ResolutionRecord.objects.count() == resolves  # nothing lost
        signals = list(LearningSignal.objects.values_list("request_id", "normalized", "verb", "outcome"))
        assert len(signals) == len(set(signals))  # nothing learned twice
        assert AutonomyTransition.objects.filter(action=send, status="proposed").count() == 1
        assert Episode.objects.filter(agent=key.agent).count() <= 2
        assert all(p.poll() is None for p in procs)  # every process still serving
        worked = []
        for _, log in workers:
            log.seek(0)
            worked.append(log.read().count("succeeded in"))
        assert sum(worked) >= selects + 2, worked  # the tasks ran on the workers, not inline in the app
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        try:
            Celery("cleanup", broker=REDIS_URL, set_as_current=False).connection_for_write().default_channel.queue_delete(queue)
        except Exception:  # the broker may be gone; the queue is per test anyway
            pass
        for log in logs:
            log.close()
            os.unlink(log.name)
