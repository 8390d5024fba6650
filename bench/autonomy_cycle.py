"""Autonomy cycles for many agents: per-agent cycles beside set-based cycles, in one run.

Outcomes (half proposals, half executions, over 20 actions and the last 25 days)
and the feedback records they imply are bulk-inserted with generate_series. A
cycle = detect mistakes, create correction rules for new patterns, calibrate
(overall + per action), evaluate autonomy, record the episode with its events.

Two data sets, each in a fresh database: 1,000 agents x 1,000 actions and
10,000 agents x 100 actions. On each, from the same starting state (everything
the cycles write is cleared between modes):

* per-agent, Celery: one ``autonomy.cycle`` task per agent sent to two real
  worker processes (``celery -A config worker --pool=solo`` twice, this 2-core
  machine) through Redis, timed from the first send to the last result (the
  10,000-agent set runs it on its first ``BENCH_PER_AGENT_SAMPLE`` agents and
  scales the time up: the full run would take many minutes);
* set-based, in-process: ``autonomy_cycles_run`` over chunks of ``AUTONOMY_CYCLE_CHUNK`` agents;
* set-based, Celery: one ``autonomy.cycle_chunk`` task per chunk, the same two workers.

Every episode is checked to be ``completed``. Targets: 1,000 agents < 20 s, 10,000 agents < 60 s.

Last line: RESULT agents1000_s=.. agents10000_s=.. (set-based through the Celery workers), with the per-agent figures.
"""

import os
import subprocess
import sys
import tempfile
import time
import uuid

from _common import ROOT, fresh_database, record, setup_django, table
from _outcomes_data import make_agents_and_actions, outcomes
from django.db import connection

DB = "bench_autonomy_cycle"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
SIZES = [(1000, 1000), (10_000, 100)]
WORKERS = 2


def start_workers(queue: str, log) -> list[subprocess.Popen]:
    env = dict(
        os.environ,
        CELERY_BROKER_URL=REDIS_URL,
        CELERY_RESULT_BACKEND=REDIS_URL,
        EMBEDDED_DB_NAME=DB,
        DJANGO_SETTINGS_MODULE="config.settings",
        LOG_LEVEL="WARNING",
        CELERY_TASK_ALWAYS_EAGER="0",
    )
    return [
        subprocess.Popen(
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
                f"bench{i}-{queue}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for i in range(WORKERS)
    ]


RESET_SQL = [
    "UPDATE feedback_feedbackrecord SET pattern_id = NULL, correction_rule_id = NULL, processed = false, processed_at = NULL "
    "WHERE pattern_id IS NOT NULL OR correction_rule_id IS NOT NULL OR processed",
    "DELETE FROM autonomy_episodeevent",
    "DELETE FROM autonomy_calibrationrecord",
    "DELETE FROM autonomy_historicalautonomytransition",
    "DELETE FROM autonomy_autonomytransition",
    "DELETE FROM autonomy_episode",
    "DELETE FROM feedback_historicalcorrectionrule",
    "DELETE FROM feedback_correctionrule",
    "DELETE FROM feedback_mistakepattern",
    "UPDATE actions_action SET last_evaluated_at = NULL",
]


def reset():
    """Forget everything a cycle writes, so each mode starts from the same state."""
    with connection.cursor() as cur:
        for sql in RESET_SQL:
            cur.execute(sql)
        for t in ("feedback_feedbackrecord", "feedback_mistakepattern", "autonomy_calibrationrecord", "actions_action"):
            cur.execute(f"VACUUM ANALYZE {t}")


def load(n_agents: int, per_agent: int) -> tuple[int, str, float]:
    fresh_database()
    t0 = time.perf_counter()
    first = make_agents_and_actions(n_agents)
    outcomes(per_agent, n_agents, first)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT count(*) FROM feedback_proposal), (SELECT count(*) FROM feedback_execution), "
            "(SELECT count(*) FROM feedback_feedbackrecord)"
        )
        n_prop, n_exec, n_fb = cur.fetchone()
    return first, f"{n_prop:,} proposals, {n_exec:,} executions, {n_fb:,} feedback records", time.perf_counter() - t0


def totals() -> str:
    from autonomy.models import AutonomyTransition, CalibrationRecord, Episode
    from feedback.models import CorrectionRule, MistakePattern

    assert not Episode.objects.exclude(status="completed").exists()
    return (
        f"{Episode.objects.count():,} episodes, {MistakePattern.objects.count():,} patterns, "
        f"{CorrectionRule.objects.count():,} rules, {CalibrationRecord.objects.count():,} calibration records, "
        f"{AutonomyTransition.objects.count()} transitions"
    )


def run_celery(client, queue, task, args_list) -> tuple[float, list]:
    t0 = time.perf_counter()
    results = [client.send_task(task, args=args, queue=queue) for args in args_list]
    answers = [r.get(timeout=3600) for r in results]
    return time.perf_counter() - t0, answers


def main():
    import redis
    from celery import Celery

    setup_django(db_name=DB)
    from django.conf import settings

    from autonomy.services import autonomy_cycles_run

    redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    chunk = settings.AUTONOMY_CYCLE_CHUNK
    sample = int(os.environ.get("BENCH_PER_AGENT_SAMPLE", "1000"))
    rows, figures = [], {}
    client = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
    for n_agents, per_agent in SIZES:
        label = f"{n_agents:,} agents x {per_agent:,} actions"
        first, work, load_s = load(n_agents, per_agent)
        rows.append([f"{label}: load (generate_series)", work, f"{load_s:.1f} s", ""])
        ids = list(range(first, first + n_agents))
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        workers = start_workers(queue, log)
        try:
            time.sleep(6)  # let both workers boot (Django setup) before the clock starts
            # per-agent, Celery (the current path)
            n_per = min(sample, n_agents)
            per_s, answers = run_celery(client, queue, "autonomy.cycle", [[a, "bench"] for a in ids[:n_per]])
            assert not any(a["skipped"] for a in answers) and all(a["status"] == "completed" for a in answers)
            scaled = per_s * n_agents / n_per
            note = "" if n_per == n_agents else f" on {n_per:,} agents, x{n_agents // n_per} = {scaled:.1f} s"
            rows.append([f"{label}: per-agent, {WORKERS} Celery workers", totals(), f"{per_s:.2f} s{note}", "current path"])
            figures[n_agents, "per_agent"] = scaled
            reset()
            # set-based, in-process
            t0 = time.perf_counter()
            for i in range(0, n_agents, chunk):
                result = autonomy_cycles_run(agent_ids=ids[i : i + chunk], trigger="bench")
                assert not result.skipped and all(e.status == "completed" for e in result.episodes)
            set_s = time.perf_counter() - t0
            rows.append([f"{label}: set-based in-process, chunks of {chunk}", totals(), f"{set_s:.2f} s", ""])
            figures[n_agents, "set_inproc"] = set_s
            reset()
            # set-based, Celery chunks
            set_celery_s, answers = run_celery(
                client, queue, "autonomy.cycle_chunk", [[ids[i : i + chunk], "bench"] for i in range(0, n_agents, chunk)]
            )
            assert sum(a["completed"] for a in answers) == n_agents, answers
            target = "< 20 s" if n_agents == 1000 else "< 60 s"
            rows.append(
                [f"{label}: set-based, {WORKERS} Celery workers, chunks of {chunk}", totals(), f"{set_celery_s:.2f} s", target]
            )
            figures[n_agents, "set_celery"] = set_celery_s
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                try:
                    w.wait(20)
                except subprocess.TimeoutExpired:
                    w.kill()
            client.connection_for_write().default_channel.queue_delete(queue)
    body = table(["run", "work", "time", "target"], rows)
    body += (
        "\n\nEach mode starts from the same state (patterns, rules, calibration, transitions, episodes and links cleared). "
        "The per-agent time for 10,000 agents is measured on a sample and scaled linearly."
    )
    print(body)
    a1, a10 = figures[1000, "set_celery"], figures[10000, "set_celery"]
    record(
        "autonomy_cycle",
        body,
        f"RESULT agents1000_s={a1:.2f} agents10000_s={a10:.2f} "
        f"per_agent1000_s={figures[1000, 'per_agent']:.2f} per_agent10000_s={figures[10000, 'per_agent']:.2f} "
        f"set_inprocess1000_s={figures[1000, 'set_inproc']:.2f} set_inprocess10000_s={figures[10000, 'set_inproc']:.2f}",
    )


if __name__ == "__main__":
    main()
