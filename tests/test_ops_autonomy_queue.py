"""Queuing autonomy cycles: the broker or result store down, no broker configured, a run that stops partway."""

import subprocess
import sys
import time
from io import StringIO

import pytest
from celery import Celery, current_app
from django.core.management import call_command
from django.core.management.base import CommandError
from kombu.exceptions import OperationalError

from agents.models import Agent
from autonomy.models import Episode
from autonomy.tasks import autonomy_cycle, autonomy_cycle_all, autonomy_cycle_chunk
from common.tasks import task_send
from config.celery import app
from tests.conftest import ROOT_DIR, process_env

DOWN = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def run_command(*argv, **env):
    """``manage.py`` in a separate process on this test's database; (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT_DIR,
        env={**process_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_queue_with_the_broker_down_runs_here_quickly_or_says_nothing_was_queued():
    agent = Agent.objects.create(name="queued")
    code, out, err, seconds = run_command(
        "run_autonomy_cycle", "--agent", str(agent.pk), "--queue", CELERY_BROKER_URL=DOWN, CELERY_RESULT_BACKEND=DOWN
    )
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert f"Broker unavailable: nothing was queued; running the cycles of 1 agent(s) (#{agent.pk}) here." in out
    assert "1 cycle(s) run" in out and Episode.objects.get(agent=agent).status == "completed"
    assert seconds < 15, seconds  # the result store's retries are bounded: no 20 s hang

    code, out, err, seconds = run_command(
        "run_autonomy_cycle",
        "--all",
        "--queue",
        CELERY_BROKER_URL=DOWN,
        CELERY_RESULT_BACKEND=DOWN,
        CELERY_FALLBACK_INLINE="0",
    )
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("CommandError: Broker unavailable: nothing was queued; 1 agent(s)")
    assert Episode.objects.count() == 1 and seconds < 15


def test_the_bounds_on_reaching_the_result_store():
    policy = app.conf.result_backend_transport_options["retry_policy"]
    assert policy["max_retries"] * policy["interval_max"] <= 2 and app.conf.redis_socket_connect_timeout


RAN = []
down = Celery("down-store", broker=DOWN, backend=DOWN, set_as_current=False)
down.conf.broker_connection_retry_on_startup = False
down.conf.broker_transport_options = {"socket_connect_timeout": 0.5, "max_retries": 0}
down.conf.redis_socket_connect_timeout = 0.5
down.conf.result_backend_transport_options = {"retry_policy": {"max_retries": 1, "interval_start": 0, "interval_step": 0.1}}


@down.task(name="tests.ops_keeps_its_result")
def keeps_its_result(value):
    RAN.append(value)
    return value


def test_task_send_falls_back_when_the_result_store_is_down(settings):
    """A task that keeps its result subscribes to it before it is sent: the store down is the broker down."""
    RAN.clear()
    settings.CELERY_FALLBACK_INLINE = True
    try:
        started = time.monotonic()
        assert task_send(keeps_its_result, 1) is False and RAN == [1]
        assert task_send(keeps_its_result, 2, fallback_inline=False) is False and RAN == [1]
        assert time.monotonic() - started < 10
    finally:
        app.set_current()  # running the other app's task inline made it the current app


@pytest.fixture
def broker(monkeypatch):
    """A broker that takes the first ``up`` sends of a cycle task, then refuses (the result store's error, or with
    ``broker`` the broker's); answers what it took."""
    monkeypatch.setitem(current_app.conf, "task_always_eager", False)
    taken: list = []
    state = {"up": 10**6, "broker": False}

    def apply_async(self, args=None, kwargs=None, **options):
        if len(taken) >= state["up"]:
            if state["broker"]:
                raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
            raise RuntimeError("Retry limit exceeded") from ConnectionError("Connection refused")
        taken.append(args[0])

    for task in (autonomy_cycle, autonomy_cycle_chunk):
        monkeypatch.setattr(type(task._get_current_object()), "apply_async", apply_async)
    return taken, state


@pytest.mark.django_db
def test_a_run_that_stops_partway_says_which_agents_were_queued_and_runs_the_rest(broker, settings):
    taken, state = broker
    ids = [Agent.objects.create(name=f"a{i}").pk for i in range(5)]
    state["up"] = 1
    out = StringIO()
    call_command("run_autonomy_cycle", "--all", "--chunk", "2", "--queue", stdout=out)
    assert taken == [ids[:2]]
    rest = ", ".join(f"#{i}" for i in ids[2:])
    assert f"Broker unavailable: queued 2 agent(s) (#{ids[0]}, #{ids[1]}); running the cycles of 3 agent(s) ({rest}) here." in (
        out.getvalue()
    )
    assert "3 cycle(s) run" in out.getvalue()
    assert sorted(Episode.objects.values_list("agent_id", flat=True)) == ids[2:]

    settings.CELERY_FALLBACK_INLINE = False
    taken.clear()
    state["broker"] = True
    with pytest.raises(CommandError, match=rf"queued 1 agent\(s\) \(#{ids[0]}\); 4 agent\(s\) \(.*\) not queued"):
        call_command("run_autonomy_cycle", "--all", "--per-agent", "--queue")
    assert taken == [ids[0]] and Episode.objects.count() == 3


@pytest.mark.django_db
def test_queue_with_the_broker_up_queues_every_chunk(broker):
    taken, _state = broker
    ids = [Agent.objects.create(name=f"b{i}").pk for i in range(3)]
    out = StringIO()
    call_command("run_autonomy_cycle", "--all", "--chunk", "2", "--queue", stdout=out)
    assert out.getvalue().strip() == "Queued autonomy cycles for 3 agent(s) in 2 chunk(s)."
    assert taken == [ids[:2], ids[2:]] and not Episode.objects.exists()


@pytest.mark.django_db
def test_the_beat_task_sends_through_task_send(broker):
    taken, state = broker
    ids = [Agent.objects.create(name=f"c{i}").pk for i in range(3)]
    state["up"] = 0
    assert autonomy_cycle_all.apply().get() == 3  # the broker refused: every chunk ran here
    assert taken == [] and sorted(Episode.objects.values_list("agent_id", flat=True)) == ids


@pytest.mark.django_db
def test_queue_without_a_broker_says_the_cycles_ran_here():
    agent = Agent.objects.create(name="eager")
    out = StringIO()
    call_command("run_autonomy_cycle", "--agent", str(agent.pk), "--queue", stdout=out)
    assert "No Celery broker is configured (CELERY_BROKER_URL): running the cycles here." in out.getvalue()
    assert "Queued" not in out.getvalue() and "1 cycle(s) run" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--all", "--chunk", "0"], "--chunk must be at least 1 (got 0)."),
        (["--all", "--chunk", "-3"], "--chunk must be at least 1 (got -3)."),
        (["--agent", "3", "--chunk", "5"], "--chunk applies only to the set-based run of --all"),
        (["--all", "--per-agent", "--chunk", "5"], "--chunk applies only to the set-based run of --all"),
    ],
)
def test_bad_chunks_are_refused(argv, message):
    Agent.objects.create(name="chunky")
    with pytest.raises(CommandError) as exc:
        call_command("run_autonomy_cycle", *argv)
    assert str(exc.value).startswith(message)
    assert not Episode.objects.exists()


@pytest.mark.django_db
def test_the_cycle_task_reports_a_missing_agent_like_the_chunk_task(caplog):
    agent = Agent.objects.create(name="here")
    assert autonomy_cycle.apply(args=(999999,)).get() == {"agent": 999999, "episode": None, "skipped": False, "missing": True}
    assert "no such agent" in caplog.text
    assert autonomy_cycle_chunk.apply(args=([999999, agent.pk],)).get()["missing"] == [999999]
    assert autonomy_cycle.apply(args=(agent.pk,)).get()["missing"] is False


@pytest.mark.django_db
def test_the_beat_task_stops_asking_the_broker_once_it_refused(monkeypatch, settings):
    """Each refusal costs the broker's bounded retries (about a second): the chunks after the first refused one run
    here without asking again."""
    monkeypatch.setitem(current_app.conf, "task_always_eager", False)
    settings.AUTONOMY_CYCLE_CHUNK = 1
    attempts: list = []

    def apply_async(self, args=None, kwargs=None, **options):
        attempts.append(args[0])
        if len(attempts) > 1:
            raise RuntimeError("Retry limit exceeded") from ConnectionError("Connection refused")

    monkeypatch.setattr(type(autonomy_cycle_chunk._get_current_object()), "apply_async", apply_async)
    ids = [Agent.objects.create(name=f"d{i}").pk for i in range(4)]
    assert autonomy_cycle_all.apply().get() == 4
    assert attempts == [[ids[0]], [ids[1]]]  # one queued, one refused, then no more asking
    assert sorted(Episode.objects.values_list("agent_id", flat=True)) == ids[1:]  # the refused and the rest ran here
