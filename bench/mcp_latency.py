"""Latency of resolve through MCP (streamable HTTP, /mcp) against REST (POST /api/v1/resolve).

One uvicorn process on loopback serves config.asgi: Django's REST API and the MCP endpoint, the same
server process for both. Each round sends one REST resolve, one raw MCP ``tools/call`` (a JSON-RPC POST,
stateless 2025-11-25: the same HTTP client as REST, so the difference is the server side) and one
call through the SDK's ``ClientSession`` (what an agent uses; adds the client's own cost), in rotating
order, each with a text of its own (distinct texts: the embedder's cache never answers).
Target: MCP adds at most 5 ms p50 over REST.

    .venv/bin/python bench/mcp_latency.py [rounds]        # default 200

Last line: RESULT mcp_p50_ms=.. rest_p50_ms=..
"""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx2
import numpy as np
import requests
from _common import ROOT, free_port, fresh_database, record, setup_django, table

DB = "bench_mcp_latency"
WARMUP = 20
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
TEMPLATES = [
    "show me the client business units for region {i}",
    "open a new client business unit number {i}",
    "find the documents about contract {i}",
    "remove client business unit {i}",
    "email my manager about ticket {i}",
]


def pct(values, q):
    return float(np.percentile(np.array(values), q))


def start_uvicorn(port: int):
    env = dict(os.environ, EMBEDDED_DB_NAME=DB, DJANGO_SETTINGS_MODULE="config.settings", LOG_LEVEL="WARNING")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
        + ["--lifespan", "on", "--log-level", "warning", "--no-access-log"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("uvicorn did not start")


def main() -> None:
    setup_django(DB)
    fresh_database()
    from agents.services import agent_key_create
    from learning.catalogue import VerbEntry
    from learning.services.catalogue import verb_catalogue_load

    verb_catalogue_load(
        entries=[
            VerbEntry("cbu.list", "cbu", "List CBUs", "List client business units.", ["list all cbus", "show my cbus"]),
            VerbEntry("cbu.create", "cbu", "Create a CBU", "Open a new client business unit.", ["create a cbu"]),
            VerbEntry("cbu.delete", "cbu", "Delete a CBU", "Remove a client business unit.", ["delete a cbu"]),
            VerbEntry("document.search", "document", "Search documents", "Find documents.", ["search documents"]),
            VerbEntry("email.send", "email", "Send an email", "Send an email.", ["send an email", "email my manager"]),
        ]
    )
    _, raw = agent_key_create(agent_name="bench-mcp", scopes=["resolve", "feedback"])
    from django.db import connections

    connections.close_all()
    port = free_port()
    proc = start_uvicorn(port)
    base = f"http://127.0.0.1:{port}"
    try:
        times = asyncio.run(measure(base, raw))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    report(times)


async def measure(base: str, raw: str) -> dict[str, list[float]]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {raw}"}
    mcp_headers = {**auth, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    http = requests.Session()
    counter = iter(range(10**9))

    def text() -> str:
        i = next(counter)
        return TEMPLATES[i % len(TEMPLATES)].format(i=i)

    def rest() -> None:
        r = http.post(f"{base}/api/v1/resolve", json={"text": text(), "user_id": "alice"}, headers=auth, timeout=30)
        assert r.status_code == 200, r.text

    def mcp_raw() -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "resolve", "arguments": {"text": text(), "user_id": "alice"}},
        }
        r = http.post(f"{base}/mcp", json=body, headers=mcp_headers, timeout=30)
        assert r.status_code == 200 and not r.json()["result"].get("isError"), r.text

    times: dict[str, list[float]] = {
        "REST POST /api/v1/resolve": [],
        "MCP tools/call (raw JSON-RPC POST)": [],
        "MCP SDK ClientSession": [],
    }
    async with httpx2.AsyncClient(headers=auth, timeout=30) as client:
        async with streamable_http_client(f"{base}/mcp", http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def sdk() -> None:
                    result = await session.call_tool("resolve", {"text": text(), "user_id": "alice"})
                    assert not result.is_error, result.content

                paths = [
                    ("REST POST /api/v1/resolve", rest, False),
                    ("MCP tools/call (raw JSON-RPC POST)", mcp_raw, False),
                    ("MCP SDK ClientSession", sdk, True),
                ]
                for n in range(WARMUP + ROUNDS):
                    order = paths[n % 3 :] + paths[: n % 3]
                    for name, fn, is_async in order:
                        start = time.perf_counter()
                        if is_async:
                            await fn()
                        else:
                            fn()
                        if n >= WARMUP:
                            times[name].append((time.perf_counter() - start) * 1000)
    return times


def report(times: dict[str, list[float]]) -> None:
    rest = times["REST POST /api/v1/resolve"]
    rows = [[name, len(v), pct(v, 50), pct(v, 95), pct(v, 50) - pct(rest, 50)] for name, v in times.items()]
    body = table(["path", "calls", "p50 ms", "p95 ms", "p50 - REST p50 ms"], rows)
    mcp_p50, rest_p50 = pct(times["MCP tools/call (raw JSON-RPC POST)"], 50), pct(rest, 50)
    body += (
        f"\n\n{ROUNDS} rounds after {WARMUP} warm-up rounds; each round one call per path in rotating order, every call a "
        "distinct text (no embedder cache hits), user alice. One uvicorn process (config.asgi: Django + /mcp, stateless JSON "
        "MCP) on loopback, keep-alive clients. The raw MCP POST uses the same HTTP client as REST (server-side difference); "
        f"the SDK row adds the MCP client's own cost. Target: MCP adds <= 5 ms p50; measured {mcp_p50 - rest_p50:+.2f} ms. "
        + (
            f"Database connections from a pool of at most {pool} (DB_POOL_MAX_SIZE)."
            if (pool := int(os.environ.get("DB_POOL_MAX_SIZE") or 0)) > 0
            else "No connection pool (DB_POOL_MAX_SIZE unset): each REST request's thread opens its own connection."
        )
    )
    print(body)
    record("mcp_latency", body, f"RESULT mcp_p50_ms={mcp_p50:.2f} rest_p50_ms={rest_p50:.2f}")


if __name__ == "__main__":
    main()
