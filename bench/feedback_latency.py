"""Latency of rejecting a proposal through the API, its feedback record included.

A gunicorn worker on loopback serves the app on its own benchmark database.
An agent proposes (POST /api/v1/proposals), a review tool with a governance
key rejects it (POST /api/v1/proposals/{id}/reject) and only the rejection is
timed; the rejection writes the status change and its feedback record in one
transaction. The table holds 100,000 earlier feedback records so indexes
are not empty. Baselines, in the same run: the seed's
1 second target and the 50 ms p99 aim; also the service alone (no HTTP), so
the API overhead shows.

Last line: RESULT p50_ms=.. p99_ms=..
"""

import http.client
import json
import time

import numpy as np
from _common import fresh_database, record, setup_django, start_gunicorn, stop_gunicorn, table
from _outcomes_data import feedback_records, make_agents_and_actions

DB = "bench_feedback_latency"
N = 1000
WARMUP = 50


def call(conn, method, path, key, body=None):
    conn.request(
        method,
        path,
        json.dumps(body) if body is not None else None,
        {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    r = conn.getresponse()
    payload = r.read()
    if r.status >= 300:
        raise SystemExit(f"HTTP {r.status} on {path}: {payload[:300]!r}")
    return json.loads(payload)


def main():
    setup_django(db_name=DB)
    from agents.services import agent_key_create
    from feedback.models import FeedbackRecord, Proposal
    from feedback.services.reviews import Reviewer, proposal_create, proposal_reject

    fresh_database()
    first = make_agents_and_actions(1000)
    feedback_records(100_000, 1000, first)
    agent_key, agent_raw = agent_key_create(agent_name="bench-proposer", scopes=["resolve", "feedback"])
    _, reviewer_raw = agent_key_create(agent_name="bench-reviewer", scopes=["resolve", "feedback", "governance"])
    server, port = start_gunicorn(DB)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        ids = [
            call(
                conn,
                "POST",
                "/api/v1/proposals",
                agent_raw,
                {"action": "email.send", "proposed_action": {"to": f"u{i}@example.com"}, "reasoning": {"confidence": 0.9}},
            )["id"]
            for i in range(N + WARMUP)
        ]
        latencies = []
        for i, pid in enumerate(ids):
            started = time.perf_counter()
            answer = call(
                conn,
                "POST",
                f"/api/v1/proposals/{pid}/reject",
                reviewer_raw,
                {"review_notes": "wrong recipient", "mistake_category": "recipient"},
            )
            elapsed = (time.perf_counter() - started) * 1000
            assert answer["status"] == "rejected"
            if i >= WARMUP:
                latencies.append(elapsed)
        conn.close()
    finally:
        stop_gunicorn(server)
    made = FeedbackRecord.objects.filter(proposal_id__in=ids, feedback_type="rejection").count()
    assert made == len(ids), f"{made} records for {len(ids)} rejections"
    # the service alone, in-process
    service_ms = []
    for _ in range(300):
        p = proposal_create(
            agent=agent_key.agent, action="email.send", proposed_action={"to": "x"}, reasoning={"confidence": 0.5}
        )
        started = time.perf_counter()
        proposal_reject(proposal=p, reviewer=Reviewer(source="command"), notes="wrong recipient")
        service_ms.append((time.perf_counter() - started) * 1000)
    lat = np.array(latencies)
    p50, p95, p99 = (float(np.percentile(lat, q)) for q in (50, 95, 99))
    s50, s99 = float(np.percentile(service_ms, 50)), float(np.percentile(service_ms, 99))
    rows = [
        ["API reject (HTTP, gunicorn 1 worker)", N, p50, p95, p99, "yes" if p99 < 1000 else "NO", "yes" if p99 < 50 else "NO"],
        ["service only (in-process)", len(service_ms), s50, float(np.percentile(service_ms, 95)), s99, "", ""],
    ]
    body = table(["path", "n", "p50 ms", "p95 ms", "p99 ms", "< 1 s (seed)", "< 50 ms p99 (aim)"], rows)
    body += (
        f"\n\nEvery rejection wrote exactly one feedback record in the same transaction ({made} records checked). "
        f"{Proposal.objects.count():,} proposals and {FeedbackRecord.objects.count():,} feedback records in the database."
    )
    print(body)
    record("feedback_latency", body, f"RESULT p50_ms={p50:.2f} p99_ms={p99:.2f}")


if __name__ == "__main__":
    main()
