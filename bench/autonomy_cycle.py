"""Full autonomy cycles: one agent with 10,000 actions, and 1,000 agents with 1,000 actions each.

Outcomes (half proposals, half executions, over 20 actions and the last 25
days) and the feedback records they imply are bulk-inserted with
generate_series. A cycle = detect mistakes, create correction rules for new
patterns, calibrate (overall + per action), evaluate autonomy, record the
episode with its events.

* agent10k: one cycle in-process for the agent with 10,000 actions.
* agents1000: 1,000 cycles sent to two real Celery worker processes
  (``celery -A config worker --pool=solo`` twice, on this 2-core machine)
  through Redis, timed from the first send to the last result; every
  episode is checked to be ``completed``.

Baselines, in the same run: 30 s per agent (seed) and
60 s for the 1,000-agent run (aim).

Last line: RESULT agent10k_s=.. agents1000_s=..
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
N_AGENTS = 1000
PER_AGENT = 1000
BIG = 10_000
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


def main():
    import redis
    from celery import Celery

    setup_django(db_name=DB)
    from actions.models import Action
    from autonomy.models import Episode
    from autonomy.services import autonomy_cycle_run

    redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    fresh_database()
    t0 = time.perf_counter()
    first = make_agents_and_actions(N_AGENTS + 1)
    big_agent = first + N_AGENTS
    outcomes(BIG, 1, big_agent)
    outcomes(PER_AGENT, N_AGENTS, first)
    load_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT count(*) FROM feedback_proposal), (SELECT count(*) FROM feedback_execution), "
            "(SELECT count(*) FROM feedback_feedbackrecord)"
        )
        n_prop, n_exec, n_fb = cur.fetchone()

    t0 = time.perf_counter()
    episode = autonomy_cycle_run(agent_id=big_agent, trigger="bench")
    agent10k_s = time.perf_counter() - t0
    assert episode.status == "completed"
    big_summary = episode.summary

    Action.objects.update(last_evaluated_at=None)  # the 1,000-agent run evaluates autonomy again
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    workers = start_workers(queue, log)
    client = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
    try:
        time.sleep(6)  # let both workers boot (Django setup) before the clock starts
        t0 = time.perf_counter()
        results = [client.send_task("autonomy.cycle", args=[a, "bench"], queue=queue) for a in range(first, first + N_AGENTS)]
        answers = [r.get(timeout=1800) for r in results]
        agents1000_s = time.perf_counter() - t0
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
        client.connection_for_write().default_channel.queue_delete(queue)
    done = Episode.objects.filter(agent_id__gte=first, agent_id__lt=first + N_AGENTS, status="completed").count()
    skipped = sum(1 for a in answers if a["skipped"])
    assert done == N_AGENTS and skipped == 0, (done, skipped, open(log.name).read()[-3000:])
    per_cycle = [a["summary"] for a in answers]
    rows = [
        [
            "load (generate_series)",
            f"{n_prop:,} proposals, {n_exec:,} executions, {n_fb:,} feedback records",
            f"{load_s:.1f} s",
            "",
        ],
        [
            "1 agent, 10,000 actions (in-process)",
            f"{big_summary['patterns_new']} patterns, {big_summary['rules_created']} rules, ECE {big_summary['ece']}, "
            f"{big_summary['actions_evaluated']} actions evaluated",
            f"{agent10k_s:.2f} s",
            "30 s per agent (seed)",
        ],
        [
            f"1,000 agents x 1,000 actions, {WORKERS} Celery workers",
            f"{sum(s['patterns_new'] for s in per_cycle):,} patterns, {sum(s['rules_created'] for s in per_cycle):,} rules, "
            f"{sum(s['transitions_proposed'] for s in per_cycle)} transitions proposed",
            f"{agents1000_s:.2f} s ({agents1000_s / N_AGENTS * 1000:.0f} ms per cycle wall)",
            "60 s total (aim)",
        ],
    ]
    body = table(["run", "work", "time", "baseline"], rows)
    body += (
        "\n\nAn action with an open transition gets no second one, so the 1,000-agent run proposes none for "
        "actions the 10,000-action run already opened a transition for."
    )
    print(body)
    record("autonomy_cycle", body, f"RESULT agent10k_s={agent10k_s:.2f} agents1000_s={agents1000_s:.2f}")


if __name__ == "__main__":
    main()
