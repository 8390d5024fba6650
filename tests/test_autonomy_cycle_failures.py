"""One agent whose cycle fails fails alone: a set-based chunk falls back to per-agent cycles, the command runs every
chunk and exits non-zero naming the failed agents, the chunk task counts them."""

import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from autonomy.models import CalibrationRecord, Episode
from autonomy.services import LOCK_NAMESPACE_CYCLE, autonomy_cycles_run
from autonomy.services import agent_sets as agent_sets_module
from autonomy.services import cycle as cycle_module
from autonomy.tasks import autonomy_cycle_all, autonomy_cycle_chunk
from feedback.models import CorrectionRule, MistakePattern
from tests.conftest import advisory_lock_held_elsewhere
from tests.test_autonomy_cycles_set_based import build


def calibration_fails_for(monkeypatch, bad: set[int]) -> None:
    """The calibration step raises for the agents ``bad`` (set-based: for any set containing one), as if their data
    broke it; detection and rules have run (and committed) before it."""
    set_based, per_agent = agent_sets_module.calibration_compute_for_agents, cycle_module.calibration_compute

    def for_agents(*, agent_ids, **kwargs):
        if bad & set(agent_ids):
            raise ValueError(f"bad data of agent {min(bad & set(agent_ids))}")
        return set_based(agent_ids=agent_ids, **kwargs)

    def for_one(*, agent_id, **kwargs):
        if agent_id in bad:
            raise ValueError(f"bad data of agent {agent_id}")
        return per_agent(agent_id=agent_id, **kwargs)

    monkeypatch.setattr(agent_sets_module, "calibration_compute_for_agents", for_agents)
    monkeypatch.setattr(cycle_module, "calibration_compute", for_one)


def statuses() -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for agent_id, status in Episode.objects.order_by("id").values_list("agent_id", "status"):
        out.setdefault(agent_id, []).append(status)
    return out


def kinds(episode) -> list[str]:
    return list(episode.events.order_by("seq").values_list("kind", flat=True))


@pytest.mark.django_db
def test_a_failing_agent_fails_alone_and_the_rest_of_its_chunk_completes(monkeypatch, caplog):
    agents = build(n_agents=4)
    ids = [a.pk for a in agents]
    bad = ids[1]
    calibration_fails_for(monkeypatch, {bad})

    with caplog.at_level(logging.INFO, logger="autonomy"):
        result = autonomy_cycles_run(agent_ids=ids, trigger="test")

    assert result.failed == [bad] and not result.skipped and not result.missing
    assert [e.agent_id for e in result.episodes] == ids
    # one episode per agent: only the failing agent's failed
    assert statuses() == {a: ["failed" if a == bad else "completed"] for a in ids}

    failed = Episode.objects.get(agent_id=bad)
    assert failed.summary["error"] == f"bad data of agent {bad}"
    last = failed.events.order_by("seq").last()
    assert (last.kind, last.message) == ("failed", f"ValueError: bad data of agent {bad}")
    assert kinds(failed)[0] == "chunk_fallback"

    for a in ids:
        if a == bad:
            continue
        episode = Episode.objects.get(agent_id=a)
        assert episode.finished_at is not None and "error" not in episode.summary
        k = kinds(episode)
        assert k[0] == "chunk_fallback" and k[-1] == "summary" and "calibration" in k and "failed" not in k
        assert list(episode.events.order_by("seq").values_list("seq", flat=True)) == list(range(1, len(k) + 1))
        # another agent's error text is in no healthy episode (it may be another tenant's)
        assert "bad data" not in " ".join(episode.events.values_list("message", flat=True))
        assert "bad data" not in str(episode.summary)
        # what the chunk did before it failed (committed: detection, rules) is counted in the fallback's note
        note = episode.events.get(kind="chunk_fallback").payload
        assert note["chunk_agents"] == len(ids)
        assert note["patterns_new"] == MistakePattern.objects.filter(agent_id=a).count() > 0
        assert note["rules_created"] == CorrectionRule.objects.filter(agent_id=a).count() > 0
        assert CalibrationRecord.objects.filter(agent_id=a, episode=episode).exists()

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "autonomy.services.agent_sets"]
    assert len(warnings) == 1
    assert "one by one" in warnings[0].getMessage() and "ValueError: bad data" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None  # the set-based traceback is kept
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [f"autonomy cycle for agent {bad} failed"]
    assert errors[0].exc_info is not None


@pytest.mark.django_db
def test_a_chunk_that_succeeds_records_what_it_always_did(monkeypatch):
    agents = build(n_agents=3)
    calibration_fails_for(monkeypatch, {10**9})  # no agent of the chunk
    result = autonomy_cycles_run(agent_ids=[a.pk for a in agents], trigger="test")
    assert result.failed == [] and all(e.status == "completed" for e in result.episodes)
    assert all(kinds(e)[0] != "chunk_fallback" for e in result.episodes)


@pytest.mark.django_db
def test_a_set_based_failure_of_no_agent_completes_every_agent_on_its_own(monkeypatch, caplog):
    """The set-based run failed after writing its events (in the last statement): its episodes are begun again, the
    per-agent cycles complete them all, and what the set did is counted in each."""
    agents = build(n_agents=3)
    ids = [a.pk for a in agents]

    def finish_fails(episodes, summaries, status):
        raise RuntimeError("set-based only")

    monkeypatch.setattr(agent_sets_module, "_finish", finish_fails)
    with caplog.at_level(logging.INFO, logger="autonomy"):
        result = autonomy_cycles_run(agent_ids=ids, trigger="test")
    assert result.failed == [] and [e.agent_id for e in result.episodes] == ids
    assert statuses() == {a: ["completed"] for a in ids}
    for episode in Episode.objects.all():
        k = kinds(episode)
        # the set's events are gone (they said the same as its counts); one note of them, then the per-agent run
        assert k[0] == "chunk_fallback" and k.count("mistake_detection") == 1 and k[-1] == "summary"
        note = episode.events.get(kind="chunk_fallback")
        assert note.payload["patterns_new"] == MistakePattern.objects.filter(agent_id=episode.agent_id).count() > 0
        assert "actions_evaluated" in note.payload and "done before the failure, kept: patterns new:" in note.message
        assert episode.summary["patterns_new"] == 0  # detected by the set-based run already
    assert any("RuntimeError: set-based only" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.django_db(transaction=True)
def test_the_fallback_keeps_skipping_agents_another_worker_is_running(monkeypatch):
    agents = build(n_agents=4)
    ids = [a.pk for a in agents]
    locked, bad = ids[0], ids[2]
    calibration_fails_for(monkeypatch, {bad})
    with advisory_lock_held_elsewhere(LOCK_NAMESPACE_CYCLE, locked):
        result = autonomy_cycles_run(agent_ids=ids)
    assert result.skipped == [locked] and result.failed == [bad]
    assert statuses() == {ids[1]: ["completed"], bad: ["failed"], ids[3]: ["completed"]}
    # every lock of the set was released: a second worker takes them at once
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s", [LOCK_NAMESPACE_CYCLE])
        assert cur.fetchone()[0] == 0


@pytest.mark.django_db
def test_the_chunk_task_counts_the_failed_agents(monkeypatch):
    agents = build(n_agents=3)
    ids = [a.pk for a in agents]
    calibration_fails_for(monkeypatch, {ids[0]})
    answer = autonomy_cycle_chunk.apply(args=[ids, "test"]).get()
    assert answer["agents"] == 3 and answer["episodes"] == 3
    assert answer["completed"] == 2 and answer["failed"] == 1
    assert answer["skipped"] == [] and answer["missing"] == []


@pytest.mark.django_db
def test_the_beat_task_runs_every_chunk_when_one_agent_fails(monkeypatch, settings):
    settings.AUTONOMY_CYCLE_CHUNK = 2
    agents = build(n_agents=5)
    ids = [a.pk for a in agents]
    calibration_fails_for(monkeypatch, {ids[0]})
    assert autonomy_cycle_all.apply().get() == 5  # eager: 3 chunk tasks, the first with a failing agent
    assert statuses() == {a: ["failed" if a == ids[0] else "completed"] for a in ids}


@pytest.mark.django_db
@pytest.mark.parametrize("queue", [False, True])
def test_the_command_runs_every_chunk_and_names_the_failed_agents(monkeypatch, queue):
    agents = build(n_agents=5)
    ids = [a.pk for a in agents]
    bad = ids[1]
    calibration_fails_for(monkeypatch, {bad})
    stdout = StringIO()
    args = ["--all", "--chunk", "2"] + (["--queue"] if queue else [])  # no broker in tests: --queue runs them here
    with pytest.raises(CommandError) as raised:
        call_command("run_autonomy_cycle", *args, stdout=stdout)
    assert str(raised.value) == f"The autonomy cycle failed for 1 agent(s) (#{bad}); see their failed episodes and the log."
    assert "4 cycle(s) run, 0 skipped (already running elsewhere)." in stdout.getvalue()
    assert ("No Celery broker is configured" in stdout.getvalue()) == queue
    assert statuses() == {a: ["failed" if a == bad else "completed"] for a in ids}


@pytest.mark.django_db
def test_the_command_runs_the_chunks_after_one_that_raises(monkeypatch):
    """A chunk whose run raises outright (no fallback could help: the database refused the locks, say) is reported,
    and the chunks after it still run."""
    agents = build(n_agents=5)
    ids = [a.pk for a in agents]
    from autonomy.management.commands import run_autonomy_cycle as command_module

    real = command_module.autonomy_cycles_run

    def broken_first_chunk(*, agent_ids, **kwargs):
        if ids[0] in agent_ids:
            raise RuntimeError("the database went away")
        return real(agent_ids=agent_ids, **kwargs)

    monkeypatch.setattr(command_module, "autonomy_cycles_run", broken_first_chunk)
    stdout = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("run_autonomy_cycle", "--all", "--chunk", "2", stdout=stdout)
    assert str(raised.value) == (
        f"The autonomy cycle failed for 2 agent(s) (#{ids[0]}, #{ids[1]}); see their failed episodes and the log."
    )
    assert "3 cycle(s) run, 0 skipped" in stdout.getvalue()
    assert statuses() == {a: ["completed"] for a in ids[2:]}


@pytest.mark.django_db
def test_the_per_agent_command_runs_every_agent_and_names_the_failed_ones(monkeypatch):
    agents = build(n_agents=4)
    ids = [a.pk for a in agents]
    calibration_fails_for(monkeypatch, {ids[0], ids[2]})
    stdout = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("run_autonomy_cycle", "--all", "--per-agent", stdout=stdout)
    assert str(raised.value) == (
        f"The autonomy cycle failed for 2 agent(s) (#{ids[0]}, #{ids[2]}); see their failed episodes and the log."
    )
    assert "2 cycle(s) run, 0 skipped" in stdout.getvalue()
    assert statuses() == {a: ["failed" if a in (ids[0], ids[2]) else "completed"] for a in ids}
    # one agent: its failed episode and the error
    stdout = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("run_autonomy_cycle", "--agent", str(ids[0]), stdout=stdout)
    episode = Episode.objects.filter(agent_id=ids[0]).latest("id")
    assert str(raised.value) == (f"The autonomy cycle failed for 1 agent(s) (#{ids[0]}); see their failed episodes and the log.")
    assert f"Episode #{episode.pk} (failed): " in stdout.getvalue() and f"bad data of agent {ids[0]}" in stdout.getvalue()
