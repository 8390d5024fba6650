"""The MCP server over stdio (``manage.py mcp --transport stdio``), driven by the SDK's own client.

The server is a separate process on the test database, so these tests commit their data
(``transaction=True``). The helpers here are shared with tests/test_mcp_http.py.
"""

import json
import os
import queue
import subprocess
import sys
import threading
from urllib.parse import urlparse, urlunparse

import anyio
import pytest
from django.db import connection
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client

from agents.models import Scope
from agents.services import agent_key_create, api_key_revoke
from learning.models import LearnedPhrase, LearningCandidate, PhraseBlock, ResolutionRecord
from learning.services.catalogue import verb_catalogue_load
from mcp_server.server import tool_definitions, tools_permitted_sync
from tests.conftest import CBU_CATALOGUE

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESOLVE_FEEDBACK = [Scope.RESOLVE.value, Scope.FEEDBACK.value]


def server_env(**extra) -> dict:
    """The environment of a server process on this test's database (the shipped key cache: the stdio server reads
    its key afresh on every call anyway)."""
    db_name = connection.settings_dict["NAME"]
    env = dict(os.environ, EMBEDDED_DB_NAME=db_name, DJANGO_SETTINGS_MODULE="config.settings")
    env.pop("API_KEY_CACHE_S", None)
    env.pop("CELERY_BROKER_URL", None)  # learning from a selection runs inline (eager), as in the other tests
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = urlunparse(urlparse(os.environ["DATABASE_URL"])._replace(path="/" + db_name))
    env.update(extra)
    return env


def new_key(scopes=RESOLVE_FEEDBACK, name="agent-a"):
    key, raw = agent_key_create(agent_name=name, scopes=scopes)
    return key, raw


def stdio_params(raw_key: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp", "--transport", "stdio"], env=server_env(AGENT_API_KEY=raw_key), cwd=ROOT
    )


def run(flow, *args):
    """Run an async client flow from a sync test (the test's own ORM work stays synchronous)."""
    return anyio.run(flow, *args)


async def disambiguation_loop(session) -> dict:
    """resolve (ambiguous) → select_option → resolve again; the answers."""
    first = await session.call_tool("resolve", {"text": "list all cbus", "user_id": "alice"})
    assert not first.is_error, first.content
    assert first.structured_content["outcome"] == "ambiguous", first.structured_content
    options = [o["verb"] for o in first.structured_content["options"]]
    assert "cbu.list" in options
    chosen = await session.call_tool(
        "select_option", {"request_id": first.structured_content["request_id"], "selected_verb": "cbu.list", "user_id": "alice"}
    )
    assert not chosen.is_error, chosen.content
    again = await session.call_tool("resolve", {"text": "list all cbus", "user_id": "alice"})
    return {"first": first.structured_content, "chosen": chosen.structured_content, "again": again.structured_content}


def check_loop(answers: dict) -> None:
    assert answers["chosen"]["status"] == "selected" and answers["chosen"]["selected_verb"] == "cbu.list"
    assert answers["again"]["outcome"] == "resolved" and answers["again"]["verb"] == "cbu.list"
    assert LearnedPhrase.objects.filter(normalized="list all cbus", user_id="alice", verb__name="cbu.list").exists()
    # every answer is stored with its explanation, and the click labels the ambiguous one for the decision fit
    records = {str(r.request_id): r for r in ResolutionRecord.objects.filter(user_id="alice", normalized="list all cbus")}
    first, again = records[answers["first"]["request_id"]], records[answers["again"]["request_id"]]
    assert (first.outcome, first.label_source, first.gold_verb) == ("ambiguous", "click", "cbu.list")
    assert first.agent_id is not None and first.label == (first.top_verb == "cbu.list")
    assert again.outcome == "resolved" and again.verb == "cbu.list" and again.label is None


def pending_candidate() -> LearningCandidate:
    return LearningCandidate.objects.create(
        input_pattern="show every cbu", normalized="show every cbu", suggested_output="cbu.list", confidence=0.9
    )


async def governance_attempts(session, candidate_id: int) -> list:
    return [
        await session.call_tool("block_phrase", {"phrase": "list all cbus", "verb": "cbu.list", "expires_in": "1d"}),
        await session.call_tool("approve_learning_candidate", {"candidate_id": candidate_id}),
        await session.call_tool("list_learning_candidates", {}),
        await session.call_tool(
            "import_phrases", {"format": "csv", "content": "phrase,verb\nzap it,cbu.delete\n", "dry_run": False}
        ),
    ]


def check_refused(results: list, candidate_id: int, blocks_before: int, phrases_before: int) -> None:
    for result in results:
        assert result.is_error
        assert result.structured_content["status"] == 403 and result.structured_content["code"] == "permission_denied"
        assert "governance" in result.content[0].text
    assert PhraseBlock.objects.count() == blocks_before
    assert LearningCandidate.objects.get(pk=candidate_id).status == "pending"
    assert LearnedPhrase.objects.count() == phrases_before


def test_stdio_tools_loop_scopes_and_revocation():
    verb_catalogue_load(entries=CBU_CATALOGUE)
    key, raw = new_key()
    candidate = pending_candidate()
    blocks, phrases = PhraseBlock.objects.count(), LearnedPhrase.objects.count()
    # tools/list shows only what the key's scopes allow (resolve + feedback: no governance tools)
    permitted = set(tools_permitted_sync(f"Bearer {raw}", "test").data)
    expected = {t.name: t.input_schema for t in tool_definitions() if t.name in permitted}
    assert permitted and len(expected) < len(tool_definitions())

    async def flow():
        async with stdio_client(stdio_params(raw)) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "agent-learning-governance"
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert {n: t.input_schema for n, t in listed.items()} == expected
            assert all(t.description for t in listed.values())
            loop = await disambiguation_loop(session)
            refused = await governance_attempts(session, candidate.pk)
            bad = await session.call_tool("resolve", {"limit": 0})
            unknown = await session.call_tool("resolve", {"text": "x", "colour": "red"})
            verbs = await session.read_resource("alg://verbs")
            return loop, refused, bad, unknown, verbs

    loop, refused, bad, unknown, verbs = run(flow)
    check_loop(loop)
    check_refused(refused, candidate.pk, blocks, phrases + 1)  # + the phrase alice's choice taught
    assert bad.is_error and set(bad.structured_content["fields"]) == {"text", "limit"}
    assert unknown.is_error and set(unknown.structured_content["fields"]) == {"colour"}
    assert "text: This field is required." in bad.content[0].text and "limit:" in bad.content[0].text
    assert '"cbu.list"' in verbs.contents[0].text

    async def revoked_flow():
        async with stdio_client(stdio_params(raw)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ok = await session.call_tool("resolve", {"text": "delete a cbu"})
            await anyio.to_thread.run_sync(revoke, key)
            with pytest.raises(MCPError) as refused:
                await session.call_tool("resolve", {"text": "delete a cbu"})
            return ok, refused.value

    ok, error = run(revoked_flow)
    assert ok.structured_content["verb"] == "cbu.delete"
    assert error.code == -32010 and "revoked" in error.message


def revoke(key):
    api_key_revoke(key=key)
    connection.close()  # this ran on a worker thread: do not leave its connection behind


def test_stdio_refuses_to_start_without_a_valid_key():
    for raw in ("", "alg_nope_not-a-key"):
        done = subprocess.run(
            [sys.executable, "manage.py", "mcp", "--transport", "stdio"],
            cwd=ROOT,
            env=server_env(AGENT_API_KEY=raw),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        assert "AGENT_API_KEY" in done.stderr
        assert done.stdout == ""  # the stdio wire stays clean


class RawStdio:
    """The stdio server driven line by line, for what an SDK client never sends."""

    def __init__(self, raw_key: str, **env):
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "mcp", "--transport", "stdio"],
            cwd=ROOT,
            env=server_env(AGENT_API_KEY=raw_key, **env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in iter(self.proc.stdout.readline, b"")], daemon=True).start()

    def send(self, line: bytes) -> dict:
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.lines.get(timeout=60))

    def request(self, id_: int, method: str, params: dict | None = None) -> dict:
        message = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}
        return self.send(json.dumps(message).encode())

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def test_stdio_answers_unreadable_lines_and_throttles_a_busy_key():
    _, raw = new_key()
    server = RawStdio(raw, API_KEY_RATE="2/min")
    try:
        for line in (
            b'{"jsonrpc": "2.0", "id": 4, "method": ',
            b"\xff\xfe garbage",
            b'{"text": "caf\xe9"}',
            b'{"a": "\xed\xa0\x80"}',
        ):
            answer = server.send(line)  # not JSON, or not utf-8 (never read with replacement characters)
            assert answer["id"] is None and answer["error"]["code"] == -32700, (line, answer)
        for line, line_id in (
            (b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]', None),
            (b'{"id": 6}', 6),
            (b'{"a": "x\\ud800y"}', None),
            (b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', None),  # an id no answer can carry: the session goes on
        ):
            answer = server.send(line)  # the message's own id when it has one, as HTTP answers
            assert answer["id"] == line_id and answer["error"]["code"] == -32600, (line, answer)
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        assert server.request(1, "initialize", init)["result"]["serverInfo"]["name"] == "agent-learning-governance"
        server.proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        calls = [server.request(i, "tools/call", {"name": "resolve", "arguments": {"text": "x"}}) for i in (2, 3, 4)]
        for params, member in (({"name": "resolve", "arguments": "x"}, "arguments"), ({"name": 7, "arguments": {}}, "name")):
            answer = server.request(9, "tools/call", params)  # answered as HTTP answers it, naming the member
            assert answer["id"] == 9 and answer["error"]["code"] == -32602 and member in answer["error"]["message"], answer
        assert [("result" in c) for c in calls] == [True, True, False], calls
        assert calls[2]["error"]["code"] == -32011 and calls[2]["error"]["data"]["wait"] > 0
        assert server.request(5, "ping") == {"jsonrpc": "2.0", "id": 5, "result": {}}  # the session went on
    finally:
        server.close()


def test_stdio_answers_a_call_still_running_when_its_input_ends_and_says_why_before_initialize():
    """stdin closed right after a write: the server answers it before it stops (it answered "Connection closed" for
    a write that committed, and a retry would apply it twice); a call before initialize is told to initialize."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = new_key()
    early = RawStdio(raw)
    try:
        answer = early.request(1, "tools/call", {"name": "resolve", "arguments": {"text": "x"}})
        assert answer["error"]["code"] == -32602 and "initialize" in answer["error"]["message"], answer
    finally:
        early.close()
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    confirm = {
        "name": "confirm_resolution",
        "arguments": {"text": "every client unit please", "verb": "cbu.list", "user_id": "al"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": confirm},
    ]
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--transport", "stdio"],
        cwd=ROOT,
        env=server_env(AGENT_API_KEY=raw),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    out, _ = proc.communicate(b"".join(json.dumps(line).encode() + b"\n" for line in lines), timeout=120)
    answers = {a["id"]: a for a in map(json.loads, out.splitlines())}
    assert proc.returncode == 0 and "result" in answers[2] and not answers[2]["result"].get("isError"), answers
    assert LearnedPhrase.objects.filter(normalized="every client unit please").exists()
