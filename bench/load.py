"""Load test of the API on loopback.

gunicorn serves the app on a benchmark database (demo catalogue). Several
client processes send a fixed number of requests with a realistic mix:
70% resolve, 15% feedback (corrections, and selections of ambiguous answers),
10% memory (retrieve / observe), 5% proposals and their reviews. Every request
is valid, so any non-2xx answer (other than a 409 the mix can legitimately
cause) or a connection failure counts as an error; the target is 0.

A second, abusive phase runs beside the same normal traffic: LOAD_ABUSE_CLIENTS (20) processes for
LOAD_ABUSE_SECONDS (60) send bad keys (random and aimed at the real key's prefix) and bad inputs (lone
surrogates, NUL, 1e400, huge offsets, deep nesting, unknown fields, oversized bodies), loopback only,
each client at most LOAD_ABUSE_RPS requests/s. Bad requests must answer 4xx; valid ones must never be
refused because of them (``valid_throttled``: 429s seen by the normal clients; per-key rate limits are
set out of reach for the run). LOAD_ABUSE_SECONDS=0 skips the phase.

Last line: RESULT rps=.. p95_ms=.. errors_5xx=.. valid_throttled=..
"""

import http.client
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np
from _common import ROOT, fresh_database, record, setup_django, table

DB = "bench_load"
TOTAL_REQUESTS = int(os.environ.get("LOAD_REQUESTS", "3000"))
CLIENTS = int(os.environ.get("LOAD_CLIENTS", "4"))
WORKERS = int(os.environ.get("LOAD_WORKERS", "3"))
ABUSE_CLIENTS = min(int(os.environ.get("LOAD_ABUSE_CLIENTS", "20")), 50)
ABUSE_SECONDS = min(float(os.environ.get("LOAD_ABUSE_SECONDS", "60")), 300.0)
ABUSE_RPS = min(float(os.environ.get("LOAD_ABUSE_RPS", "20")), 100.0)  # per abusive client


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def client(port: int, key: str, reviewer_key: str, n: int, seed: int, texts: list[str], verbs: list[str], results_queue) -> None:
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    # Reviews come from a separate review tool: an agent may not review its own proposals.
    reviewer_headers = {"Authorization": f"Bearer {reviewer_key}", "Content-Type": "application/json"}
    lat: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    open_requests: list[tuple[str, list[str]]] = []
    proposals: list[int] = []
    user = f"load-user-{seed}"

    def call(name, method, path, body=None, ok=(200, 201), as_reviewer=False):
        nonlocal conn
        started = time.perf_counter()
        try:
            conn.request(
                method, path, json.dumps(body) if body is not None else None, reviewer_headers if as_reviewer else headers
            )
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{name}: {exc.__class__.__name__}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            return None
        lat[name].append((time.perf_counter() - started) * 1000)
        if response.status not in ok:
            errors.append(f"{name}: HTTP {response.status} {payload[:200]!r}")
            return None
        return json.loads(payload) if payload else {}

    for _ in range(n):
        roll = rng.random()
        text = rng.choice(texts)
        if roll < 0.70:
            body = call("resolve", "POST", "/api/v1/resolve", {"text": text, "user_id": user})
            if body and body.get("outcome") == "ambiguous" and body.get("options"):
                open_requests.append((body["request_id"], [o["verb"] for o in body["options"]]))
        elif roll < 0.85:
            if open_requests and rng.random() < 0.5:
                request_id, options = open_requests.pop()
                call("select", "POST", f"/api/v1/disambiguations/{request_id}/select", {"selected_verb": rng.choice(options)})
            else:
                wrong, right = rng.sample(verbs, 2)
                call(
                    "correction",
                    "POST",
                    "/api/v1/resolutions/correct",
                    {"text": text, "wrong_verb": wrong, "correct_verb": right, "user_id": user},
                )
        elif roll < 0.95:
            if rng.random() < 0.5:
                call("memory_retrieve", "POST", "/api/v1/memories/retrieve", {"user_id": user, "query": text})
            else:
                call(
                    "memory_observe",
                    "POST",
                    "/api/v1/memories/observe",
                    {
                        "user_id": user,
                        "user_message": f"How do I handle this: {text}",
                        "assistant_message": f"Open the app, go to cards and choose the option for '{text[:40]}'; it takes a minute.",
                        "meta": {},
                    },
                    ok=(200, 201),
                )
        else:
            if proposals and rng.random() < 0.5:
                pid = proposals.pop()
                action = rng.choice(["approve", "reject"])
                call(
                    f"proposal_{action}",
                    "POST",
                    f"/api/v1/proposals/{pid}/{action}",
                    {"review_notes": "load test"},
                    as_reviewer=True,
                )
            else:
                body = call(
                    "proposal_create",
                    "POST",
                    "/api/v1/proposals",
                    {
                        "action": "card.freeze",
                        "proposed_action": {"card": "1234", "reason": text[:50]},
                        "reasoning": {"confidence": round(rng.uniform(0.5, 1.0), 2), "why": "load"},
                    },
                )
                if body and "id" in body:
                    proposals.append(body["id"])
    conn.close()
    results_queue.put((dict(lat), errors))


def abuser(port: int, key: str, seed: int, seconds: float, results_queue) -> None:
    """Bad keys and bad inputs for ``seconds``; answers (5xx count, connection errors, 4xx count, requests)."""
    rng = random.Random(seed)
    prefix = key.split("_")[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    good = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    bad_inputs = [
        ("POST", "/api/v1/resolve", '{"text": "\\ud800"}'),
        ("POST", "/api/v1/executions", '{"action": "a.b", "params": {"x": "a\\u0000b"}, "confidence": 0.5, "success": true}'),
        ("POST", "/api/v1/executions", '{"action": "a.b", "params": {"n": 1e400}, "confidence": 0.5, "success": true}'),
        ("POST", "/api/v1/proposals", '{"action": "a.b", "proposed_action": {}, "reasoning": {"confidence": false}}'),
        ("GET", "/api/v1/proposals?offset=9223372036854775808", None),
        ("GET", "/api/v1/feedback-records?status=%00", None),
        ("POST", "/api/v1/resolve", "[" * 50_000 + "]" * 50_000),
        ("POST", "/api/v1/resolve", '{"text": "list cbus", "usr_id": "typo"}'),
        ("POST", "/api/v1/resolve", '{"text": "' + "x" * 1_100_000 + '"}'),
        ("POST", "/api/v1/resolve", "{not json"),
    ]
    deadline = time.monotonic() + seconds
    server_errors, conn_errors, refused, sent = 0, 0, 0, 0
    while time.monotonic() < deadline:
        tick = time.monotonic()
        if rng.random() < 0.5:
            fake = f"alg_{prefix}_{rng.getrandbits(64):x}" if rng.random() < 0.5 else f"alg_{rng.getrandbits(32):08x}_x"
            method, path, body, headers = "POST", "/api/v1/resolve", '{"text": "hi"}', {**good, "Authorization": f"Bearer {fake}"}
        else:
            method, path, body = rng.choice(bad_inputs)
            headers = good
        try:
            conn.request(method, path, body.encode("utf-8", "surrogatepass") if body else None, headers)
            response = conn.getresponse()
            response.read()
            sent += 1
            if response.status >= 500:
                server_errors += 1
            elif response.status >= 400:
                refused += 1
        except (OSError, http.client.HTTPException):
            conn_errors += 1  # the server may close a connection on an oversized body: not a 5xx
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        time.sleep(max(0.0, 1.0 / ABUSE_RPS - (time.monotonic() - tick)))
    conn.close()
    results_queue.put((server_errors, conn_errors, refused, sent))


def main():
    setup_django(db_name=DB)
    from agents.models import Scope
    from agents.services import agent_key_create
    from learning import datasets
    from learning.management.commands.demo import banking_entries
    from learning.services.catalogue import verb_catalogue_load

    fresh_database()
    entries = banking_entries()
    verb_catalogue_load(entries=entries)
    _, key = agent_key_create(agent_name="load", scopes=[Scope.RESOLVE.value, Scope.FEEDBACK.value])
    _, reviewer_key = agent_key_create(agent_name="load-review-tool", scopes=[s.value for s in Scope])
    texts = [e.text for e in datasets.load("test")]
    verbs = [e.name for e in entries]

    port = free_port()
    # Real failed-authentication limits (the abusive phase meets them); per-key rates out of reach, so any 429 a
    # valid request sees is a lockout caused by others' failures.
    env = dict(os.environ, EMBEDDED_DB_NAME=DB, LOG_LEVEL="WARNING", API_KEY_RATE="100000000/min")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(WORKERS),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.2)
        # warm every worker (model load)
        warm = mp.Queue()
        for i in range(WORKERS * 2):
            client(port, key, reviewer_key, 3, 10_000 + i, texts[:50], verbs, warm)
            warm.get()
        queue = mp.Queue()
        per_client = TOTAL_REQUESTS // CLIENTS
        procs = [
            mp.Process(target=client, args=(port, key, reviewer_key, per_client, i, texts, verbs, queue)) for i in range(CLIENTS)
        ]
        started = time.perf_counter()
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - started
        quiet_results = list(results)
        abuse = None
        if ABUSE_SECONDS > 0:  # abusive traffic beside a second round of normal traffic
            abuse_queue, normal_queue = mp.Queue(), mp.Queue()
            abusers = [
                mp.Process(target=abuser, args=(port, key, 20_000 + i, ABUSE_SECONDS, abuse_queue)) for i in range(ABUSE_CLIENTS)
            ]
            normal = [
                mp.Process(target=client, args=(port, key, reviewer_key, per_client, 30_000 + i, texts, verbs, normal_queue))
                for i in range(CLIENTS)
            ]
            abuse_started = time.perf_counter()
            for p in abusers + normal:
                p.start()
            beside = [normal_queue.get() for _ in normal]
            results += beside
            elapsed += time.perf_counter() - abuse_started  # rps: normal requests over both rounds' time
            abuse = [abuse_queue.get() for _ in abusers]
            for p in abusers + normal:
                p.join()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)

    merged: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    for lat, errs in results:
        for name, values in lat.items():
            merged[name].extend(values)
        errors.extend(errs)
    done = sum(len(v) for v in merged.values())
    rows = []
    for name in sorted(merged):
        v = np.array(merged[name])
        rows.append([name, len(v), np.percentile(v, 50), np.percentile(v, 95), np.percentile(v, 99)])
    every = np.concatenate([np.array(v) for v in merged.values()])
    rows.append(["all", len(every), np.percentile(every, 50), np.percentile(every, 95), np.percentile(every, 99)])
    body = table(["endpoint", "requests", "p50 ms", "p95 ms", "p99 ms"], rows)
    rps = done / elapsed
    body += (
        f"\n\n{done} normal requests from {CLIENTS} client processes in {elapsed:.1f} s against gunicorn "
        f"({WORKERS} workers) on loopback: {rps:.1f} requests/s, {len(errors)} errors."
    )
    valid_throttled = sum(" HTTP 429 " in e for e in errors)
    errors_5xx = sum(" HTTP 5" in e for e in errors)
    p95_quiet = np.percentile(np.concatenate([np.array(v) for lat, _ in quiet_results for v in lat.values()]), 95)
    extra = ""
    if abuse is not None:
        p95_beside = np.percentile(np.concatenate([np.array(v) for lat, _ in beside for v in lat.values()]), 95)
        extra = f" p95_quiet_ms={p95_quiet:.1f} p95_beside_abuse_ms={p95_beside:.1f}"
        body += (
            f"\n\nNormal traffic p95: {p95_quiet:.1f} ms in the quiet round, {p95_beside:.1f} ms beside the abusive "
            f"clients ({p95_beside / p95_quiet:.2f}x; target <= 2x)."
        )
        errors_5xx += sum(a[0] for a in abuse)
        body += (
            f"\n\nAbusive phase: {ABUSE_CLIENTS} clients for {ABUSE_SECONDS:.0f} s sent {sum(a[3] for a in abuse)} bad requests "
            f"(bad keys, bad inputs) beside {CLIENTS} normal clients: {sum(a[2] for a in abuse)} answered 4xx, "
            f"{sum(a[0] for a in abuse)} answered 5xx, {sum(a[1] for a in abuse)} connections dropped; "
            f"valid requests throttled: {valid_throttled}."
        )
    if errors:
        body += "\n\nFirst errors:\n" + "\n".join(f"- {e}" for e in errors[:10])
    print(body)
    record(
        "load",
        body,
        f"RESULT rps={rps:.1f} p95_ms={np.percentile(every, 95):.1f} errors_5xx={errors_5xx} valid_throttled={valid_throttled}"
        + extra,
    )


if __name__ == "__main__":
    main()
