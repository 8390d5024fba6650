"""Autonomy cycles (episodes with ordered events), the per-agent lock, command views, a real Celery worker."""

import os
import subprocess
import tempfile
import threading
import uuid
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from actions.models import Action
from agents.models import Agent
from autonomy.models import Episode
from autonomy.services import LOCK_NAMESPACE_CYCLE, autonomy_cycle_run
from feedback.models import CorrectionRule, MistakePattern, Proposal
from feedback.services.reviews import Reviewer, proposal_create, proposal_reject
from tests.conftest import REDIS_URL, celery_worker_start, process_env, redis_required

REVIEWER = Reviewer(source="command")


def seed(agent_name="cycler"):
    """Three rejections on email.send (a pattern) and 25 completed crm.update proposals (a promotion)."""
    agent = Agent.objects.create(name=agent_name)
    for _ in range(3):
        p = proposal_create(agent=agent, action="email.send", proposed_action={"to": "ceo"}, reasoning={"confidence": 0.95})
        proposal_reject(proposal=p, reviewer=REVIEWER, notes="never email the CEO")
    crm = Action.objects.create(name="crm.update", autonomy_level=1)
    Proposal.objects.bulk_create(
        [
            Proposal(agent=agent, action=crm, proposed_action={}, reasoning={}, confidence=0.9, status="completed")
            for _ in range(25)
        ]
    )
    return agent


def check_episode(episode, agent):
    assert episode.agent_id == agent.pk and episode.status == "completed" and episode.finished_at is not None
    kinds = list(episode.events.order_by("seq").values_list("kind", flat=True))
    assert kinds == [
        "pattern_detected",
        "mistake_detection",
        "rule_created",
        "calibration",
        "transition_proposed",
        "autonomy_evaluation",
        "summary",
    ]
    assert list(episode.events.order_by("seq").values_list("seq", flat=True)) == list(range(1, 8))
    assert episode.summary["patterns_new"] == 1 and episode.summary["rules_created"] == 1
    assert episode.summary["transitions_proposed"] == 1
    assert MistakePattern.objects.get(agent=agent).status == "mitigated"
    assert CorrectionRule.objects.filter(agent=agent, status="active").count() == 1
    assert Action.objects.get(name="crm.update").autonomy_level == 1  # proposed, not applied


@pytest.mark.django_db
def test_cycle_records_one_episode_with_ordered_events():
    agent = seed()
    stdout = StringIO()
    call_command("run_autonomy_cycle", "--agent", str(agent.pk), stdout=stdout)
    episode = Episode.objects.get()
    check_episode(episode, agent)
    assert f"Episode #{episode.pk}" in stdout.getvalue()
    # a second cycle finds nothing new and says so
    second = autonomy_cycle_run(agent_id=agent.pk)
    assert second.summary["patterns_new"] == 0 and second.summary["rules_created"] == 0
    with pytest.raises(CommandError):
        call_command("run_autonomy_cycle", "--agent", "nobody")


@pytest.mark.django_db(transaction=True)
def test_a_cycle_already_running_for_the_agent_is_skipped():
    agent = Agent.objects.create(name="locked")
    held, release = threading.Event(), threading.Event()

    def hold():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE_CYCLE, agent.pk])
            held.set()
            release.wait(30)
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE_CYCLE, agent.pk])
        connection.close()

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        assert autonomy_cycle_run(agent_id=agent.pk) is None
        assert Episode.objects.count() == 0
    finally:
        release.set()
        t.join()
    assert autonomy_cycle_run(agent_id=agent.pk).status == "completed"


@pytest.mark.django_db
def test_learning_command_views_print_tables():
    agent = seed()
    stdout = StringIO()
    call_command("autonomy_report", "feedback", agent.name, stdout=stdout)
    assert "action" in stdout.getvalue() and "rejection" in stdout.getvalue() and "never email the CEO" in stdout.getvalue()
    stdout = StringIO()
    call_command("autonomy_report", "mistakes", str(agent.pk), stdout=stdout)
    assert "1 new" in stdout.getvalue() and "email.send" in stdout.getvalue() and "active" in stdout.getvalue()
    stdout = StringIO()
    call_command("autonomy_report", "calibrate", agent.name, stdout=stdout)
    assert "bucket" in stdout.getvalue() and "0.9-1.0" in stdout.getvalue() and "ECE" in stdout.getvalue()
    stdout = StringIO()
    call_command("autonomy_report", "autonomy", "crm.update", stdout=stdout)
    assert "Proposed transition" in stdout.getvalue() and "1→2" in stdout.getvalue()
    stdout = StringIO()
    call_command("autonomy_report", "autonomy", "crm.update", stdout=stdout)
    assert "(1→2) is already awaiting a decision" in stdout.getvalue()
    stdout = StringIO()
    call_command("autonomy_report", "full-cycle", agent.name, stdout=stdout)
    assert "rule_created" in stdout.getvalue() and "Summary:" in stdout.getvalue()
    with pytest.raises(CommandError):
        call_command("autonomy_report", "calibrate", agent.name, "--window-days", "0")
    with pytest.raises(CommandError):
        call_command("autonomy_report", "autonomy", "no.such")
    with pytest.raises(CommandError, match="--limit must be at least 1"):
        call_command("autonomy_report", "feedback", agent.name, "--limit", "-1")


def test_beat_schedule_runs_cycles_for_all_agents():
    entry = settings.CELERY_BEAT_SCHEDULE["autonomy-cycle-all-agents"]
    assert entry["task"] == "autonomy.cycle_all" and entry["schedule"] > 0
    from autonomy import tasks

    assert tasks.autonomy_cycle_all.name == entry["task"]


@pytest.mark.django_db
def test_all_agents_task_runs_eagerly_without_a_broker():
    seed("one")
    Agent.objects.create(name="two")
    from autonomy.tasks import autonomy_cycle_all

    assert autonomy_cycle_all.apply().get() == 2
    assert Episode.objects.filter(status="completed").count() == 2


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_celery_worker_runs_a_cycle():
    from celery import Celery

    redis_required()
    agent = seed()
    queue = f"cycle-test-{uuid.uuid4().hex[:8]}"
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    worker = celery_worker_start(queue=queue, name=queue, env=process_env(), log=log)
    client = Celery("cycle-test", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
    try:
        result = client.send_task("autonomy.cycle", args=[agent.pk, "celery"], queue=queue)
        try:
            answer = result.get(timeout=120)
        except Exception:
            log.seek(0)
            pytest.fail(f"the worker did not run the cycle; its log:\n{log.read()[-4000:]}")
        assert answer["skipped"] is False and answer["status"] == "completed"
        episode = Episode.objects.get(pk=answer["episode"])
        assert episode.trigger == "celery"
        check_episode(episode, agent)
        assert worker.poll() is None  # the worker is still up: it was a real separate process
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
