"""The MCP server over streamable HTTP: config.asgi under uvicorn on 127.0.0.1, /mcp beside the REST API."""

import json

import httpx2
import pytest
import requests
from mcp import Client, ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

from agents.models import Scope
from common.parsers import text_problem
from embeddings.services import embedding_assign, embeddings_compute
from feedback.models import Proposal
from learning.models import EntityAlias, LearnedPhrase, PhraseBlock
from learning.services.catalogue import verb_catalogue_load
from mcp_server.server import tool_definitions, tools_permitted_sync
from tests.conftest import CBU_CATALOGUE, asgi_server
from tests.test_mcp_stdio import (
    check_loop,
    check_refused,
    disambiguation_loop,
    governance_attempts,
    new_key,
    pending_candidate,
    run,
    server_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def base_url(django_db_setup):
    """uvicorn serving config.asgi (Django + /mcp) on loopback, on the test database."""
    with asgi_server(server_env()) as url:
        yield url


def bearer(raw: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {raw}"}, timeout=60)


def session_flow(url: str, raw: str, body):
    """Run ``body(session)`` in a 2025-11-25 ClientSession over streamable HTTP."""

    async def flow():
        async with bearer(raw) as http, streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return run(flow)


def test_http_tools_and_the_disambiguation_loop(base_url):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = new_key()
    permitted = set(tools_permitted_sync(f"Bearer {raw}", "test").data)  # tools/list: only what the scopes allow
    expected = {t.name: t.input_schema for t in tool_definitions() if t.name in permitted}

    async def body(session):
        listed = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        return listed, await disambiguation_loop(session)

    listed, loop = session_flow(base_url, raw, body)
    assert listed == expected
    check_loop(loop)

    async def modern():  # the 2026-07-28 era (auto-detected): one POST per call, no session
        async with bearer(raw) as http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
            return await client.call_tool("resolve", {"text": "list all cbus", "user_id": "alice"})

    again = run(modern)
    assert again.structured_content["outcome"] == "resolved" and again.structured_content["verb"] == "cbu.list"

    confirm = {"text": "every client unit please", "verb": "cbu.list", "user_id": "alice"}

    async def twice(session):  # a retried write with _meta.idempotency_key runs once
        meta = {"idempotency_key": "confirm-every-unit"}
        return [await session.call_tool("confirm_resolution", confirm, meta=meta) for _ in range(2)]

    first, second = session_flow(base_url, raw, twice)
    assert not first.is_error and first.structured_content == second.structured_content
    assert (second.meta or {}).get("idempotent_replayed") is True and not (first.meta or {}).get("idempotent_replayed")
    assert LearnedPhrase.objects.get(normalized="every client unit please", user_id="alice").occurrence_count == 1


def test_http_a_resolve_only_key_cannot_govern_and_nothing_changes(base_url):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = new_key([Scope.RESOLVE.value], name="resolver")
    _, gov = new_key([s.value for s in Scope], name="reviewer")
    candidate = pending_candidate()
    blocks, phrases = PhraseBlock.objects.count(), LearnedPhrase.objects.count()

    refused = session_flow(base_url, raw, lambda s: governance_attempts(s, candidate.pk))
    check_refused(refused, candidate.pk, blocks, phrases)

    async def govern(session):
        listed = await session.call_tool("list_learning_candidates", {"status": "pending"})
        approved = await session.call_tool("approve_learning_candidate", {"candidate_id": candidate.pk})
        dry = await session.call_tool("import_phrases", {"format": "csv", "content": "phrase,verb\nzap it,cbu.delete\n"})
        return listed, approved, dry

    listed, approved, dry = session_flow(base_url, gov, govern)
    assert [c["id"] for c in listed.structured_content["results"]] == [candidate.pk]
    assert approved.structured_content["status"] == "applied"
    assert dry.structured_content["dry_run"] is True and dry.structured_content["would_add"] == ["zap it"]
    assert not LearnedPhrase.objects.filter(normalized="zap it").exists()


def test_http_another_agents_proposal_is_not_found(base_url):
    _, raw_a = new_key(name="agent-a")
    _, raw_b = new_key(name="agent-b")
    proposed = session_flow(
        base_url,
        raw_a,
        lambda s: s.call_tool(
            "propose_action",
            {"action": "email.send", "proposed_action": {"to": "ceo@example.com"}, "reasoning": {"confidence": 0.8}},
        ),
    )
    pk = proposed.structured_content["id"]

    async def other(session):
        return (
            await session.call_tool("get_proposal", {"proposal": pk}),
            await session.call_tool("record_outcome", {"proposal": pk, "success": True}),
        )

    for result in session_flow(base_url, raw_b, other):
        assert result.is_error and result.structured_content["status"] == 404, result.structured_content
    assert Proposal.objects.get(pk=pk).status == "pending"
    mine = session_flow(base_url, raw_a, lambda s: s.call_tool("get_proposal", {"proposal": pk}))
    assert mine.structured_content["id"] == pk and mine.structured_content["status"] == "pending"

    async def read(session):
        return await session.read_resource("alg://actions/email.send"), await session.read_resource("alg://actions")

    action, catalogue = session_flow(base_url, raw_a, read)
    assert '"autonomy_level": 1' in action.contents[0].text and '"active_rules": []' in action.contents[0].text
    assert json.loads(catalogue.contents[0].text)["actions"][0]["name"] == "email.send"  # registered by the proposal


def test_http_malformed_arguments_name_the_field(base_url):
    _, raw = new_key()

    async def body(session):
        bad = [
            await session.call_tool("resolve", {"text": "x", "limit": 0}),
            await session.call_tool(
                "propose_action", {"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": 1.5}}
            ),
            await session.call_tool("select_option", {"selected_verb": "cbu.list"}),
        ]
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("no_such_tool", {})
        return bad, unknown.value

    (limit, confidence, request_id), unknown = session_flow(base_url, raw, body)
    assert limit.is_error and list(limit.structured_content["fields"]) == ["limit"]
    assert limit.content[0].text.startswith("Error (invalid, 400): limit: ")
    assert confidence.is_error and "reasoning.confidence" in confidence.structured_content["fields"]
    assert request_id.is_error and "request_id" in request_id.structured_content["fields"]
    assert unknown.code == -32602


def test_http_authentication_host_and_rest_on_the_same_port(base_url):
    key, raw = new_key()
    alias = EntityAlias(alias="Big Blue", normalized="big blue", canonical_name="IBM", entity_type="company")
    vectors, model = embeddings_compute(texts=[alias.normalized])
    embedding_assign(rows=[alias], vectors=vectors, model=model)
    alias.save()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}

    anonymous = requests.post(f"{base_url}/mcp", json=call, headers=headers, timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == "Bearer"
    foreign = requests.post(
        f"{base_url}/mcp", json=call, headers={**headers, "Authorization": f"Bearer {raw}", "Host": "evil.example"}, timeout=30
    )
    assert foreign.status_code == 400

    async def wrong_key():
        async with bearer("alg_nope_wrong") as http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as c:
            with pytest.raises(MCPError) as err:
                await c.call_tool("resolve", {"text": "x"})
            return err.value

    assert run(wrong_key).code == -32010

    rest = requests.post(
        f"{base_url}/api/v1/aliases/resolve",
        json={"text": "the big blue"},
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )
    assert rest.status_code == 200, rest.text
    tool = session_flow(base_url, raw, lambda s: s.call_tool("resolve_alias", {"text": "the big blue"}))
    assert rest.json() == tool.structured_content
    assert tool.structured_content["canonical_name"] == "IBM" and tool.structured_content["outcome"] == "semantic"
    key.refresh_from_db()
    assert key.last_used_at is not None  # the REST authentication code ran


def test_http_only_post_and_the_key_before_the_tool(base_url):
    for method in ("GET", "DELETE"):
        answer = requests.request(method, f"{base_url}/mcp", headers={"Authorization": "Bearer not-a-key"}, timeout=10)
        assert answer.status_code == 405 and answer.headers["Allow"] == "POST", method
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    wrong = requests.post(
        f"{base_url}/mcp", json=call, headers={**headers, "Authorization": "Bearer alg_00000000_wrong"}, timeout=30
    )
    assert wrong.json()["error"]["code"] == -32010


def test_http_a_body_that_is_not_json_is_a_json_rpc_error_and_the_server_goes_on(base_url):
    """The SDK's own Content-Type check answered a plain-text 400; a client reads a JSON-RPC error instead."""
    _, raw = new_key()
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {raw}"}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        sent = {**headers, **({"Content-Type": content_type} if content_type else {})}
        answer = requests.post(f"{base_url}/mcp", data=call.encode(), headers=sent, timeout=30)
        assert answer.status_code == 415 and answer.headers["Content-Type"] == "application/json", content_type
        body = answer.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600
        assert "application/json" in body["error"]["message"]
    listed = requests.post(
        f"{base_url}/mcp", data=call.encode(), headers={**headers, "Content-Type": "application/json"}, timeout=30
    )
    assert listed.status_code == 200 and listed.json()["result"]["tools"]


def test_http_a_body_over_the_limit_is_a_json_rpc_413(base_url, settings):
    _, raw = new_key()
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {raw}",
    }
    big = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"x": "a" * (settings.MCP_MAX_BODY_BYTES + 1)}})
    answer = requests.post(f"{base_url}/mcp", data=big.encode(), headers=headers, timeout=60)
    assert answer.status_code == 413 and answer.headers["Content-Type"] == "application/json"
    body = answer.json()
    assert body["id"] is None and body["error"]["code"] == -32600 and "larger than" in body["error"]["message"]
    ping = requests.post(f"{base_url}/mcp", data=b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}', headers=headers, timeout=30)
    assert ping.status_code == 200 and ping.json()["id"] == 4  # the server goes on


def test_http_a_body_that_is_not_one_message_is_a_clean_json_rpc_error(base_url):
    """A batch or an object that is no message got the SDK's validation text (-32602); stdio's answer instead."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = new_key()
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
        "Authorization": f"Bearer {raw}",
    }

    def post(body: str | bytes):
        return requests.post(
            f"{base_url}/mcp", data=body if isinstance(body, bytes) else body.encode(), headers=headers, timeout=30
        )

    def call(name, arguments, id_=1):
        return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}})

    one = "The body must be a single JSON-RPC message object"
    refused = [
        ('[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]', None, -32600, one),
        ('{"id": 6}', 6, -32600, one),
        ('{"jsonrpc": "1.0", "id": "seven", "method": "ping"}', "seven", -32600, one),
        ('{"jsonrpc": "2.0", "id": [8], "method": "ping"}', None, -32600, one),
        ('{"jsonrpc": "2.0", "id": 18, "error": {"code": "x"}}', 18, -32600, one),
        ('{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": []}', 9, -32602, "params must be an object"),
        ('{"jsonrpc": "2.0", "id": 4, "method": ', None, -32700, "Parse error"),
        # a key given twice: REST refuses it too (which value was meant is not known)
        (
            '{"jsonrpc": "2.0", "id": 23, "method": "tools/call", '
            '"params": {"name": "resolve", "arguments": {"text": "list all cbus", "text": "delete all cbus"}}}',
            23,
            -32602,
            "the key 'text' appears twice in one object",
        ),
        (call("resolve", "list all cbus", 10), 10, -32602, "params.arguments must be an object"),
        (call("resolve", ["list all cbus"], 11), 11, -32602, "params.arguments must be an object"),
        (call(12, {"text": "x"}, 12), 12, -32602, "params.name must be a string"),
        ('{"jsonrpc": "2.0", "id": 13, "method": "tools/call"}', 13, -32602, "params must be an object"),
        # params that do not fit the method name the member (the SDK said "Invalid request parameters")
        ('{"jsonrpc": "2.0", "id": 19, "method": "resources/read", "params": {}}', 19, -32602, "params.uri: Field required"),
        (
            '{"jsonrpc": "2.0", "id": 20, "method": "tools/list", "params": {"cursor": 5}}',
            20,
            -32602,
            "params.cursor: Input should be a valid string",
        ),
        (
            '{"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "resolve", "_meta": "x"}}',
            21,
            -32602,
            "params._meta: Input should be a valid dictionary",
        ),
        # valid JSON the SDK's parser cannot read: answered for its request, naming the argument
        (
            call("resolve", {"text": "ab\ud800"}, 22),  # json.dumps writes the escape "\\ud800"
            22,
            -32602,
            f"params.arguments.text: The value {text_problem('ab\ud800')}.",  # as REST words it
        ),
        (
            call("propose_action", {"action": "email.send", "proposed_action": {"a": [[[[]]]]}}, 23).replace(
                "[[[[]]]]", "[" * 300 + "]" * 300
            ),
            23,
            -32602,
            "params.arguments.proposed_action: JSON nested deeper than 20 levels (arguments are level 1).",
        ),
        (b'{"jsonrpc": "2.0", "id": 24, "method": "ping", "params": {"x": "caf\xe9"}}', None, -32700, "Parse error"),
        (b'{"jsonrpc": "2.0", "id": 25, "method": "ping", "params": {"x": "\xed\xa0\x80"}}', None, -32700, "Parse error"),
        ('{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', None, -32600, one),  # an id no answer can carry
    ]
    for body, id_, code, message in refused:
        answer = post(body)
        assert answer.status_code == 400 and answer.headers["Content-Type"] == "application/json", (body, answer.text)
        assert answer.json() == {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}, body

    resolved = post(call("resolve", {"text": "list all cbus", "user_id": "alice"}, 14))
    assert resolved.status_code == 200 and resolved.json()["id"] == 14, resolved.text
    result = resolved.json()["result"]
    assert result["isError"] is False and result["structuredContent"]["candidates"][0]["verb"] == "cbu.list", resolved.text
    assert post(call("resolve", None, 15)).json()["result"]["isError"] is True  # no arguments: the tool names the field
    assert post('{"jsonrpc": "2.0", "id": 16, "method": "ping"}').json() == {"jsonrpc": "2.0", "id": 16, "result": {}}
    assert post('{"jsonrpc": "2.0", "method": "notifications/initialized"}').status_code == 202
    assert post('{"jsonrpc": "2.0", "id": 17, "result": {}}').status_code == 202  # a response passes through


def test_http_resources_are_listed_by_scope(base_url):
    _, feedback_only = new_key([Scope.FEEDBACK.value], name="writer")
    _, resolver = new_key([Scope.RESOLVE.value], name="reader")

    async def body(session):
        return (await session.list_resources()).resources, (await session.list_resource_templates()).resource_templates

    resources, templates = session_flow(base_url, feedback_only, body)
    assert resources == [] and templates == []
    resources, templates = session_flow(base_url, resolver, body)
    assert {str(r.uri) for r in resources} == {"alg://verbs", "alg://actions"} and len(templates) == 1


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
MODERN_HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "resolve"}


def _post(url: str, raw: str, body: dict, **headers) -> requests.Response:
    sent = {"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {raw}", **headers}
    return requests.post(f"{url}/mcp", data=json.dumps(body), headers=sent, timeout=60)


def test_http_a_call_on_the_newer_protocol_version_counts_once_against_the_rate():
    """The SDK checks a call's Mcp-Param headers against the tool's schema first: read without the key, so the call is
    authenticated (and counted) once, as on the older version."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = new_key()
    with asgi_server(server_env(API_KEY_RATE="3/min")) as url:
        answers = []
        for i in range(4):
            call = {"name": "resolve", "arguments": {"text": "list all cbus"}, "_meta": MODERN_META}
            answers.append(_post(url, raw, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call}, **MODERN_HEADERS))
    outcomes = [("result" in a.json()) or a.json()["error"]["code"] for a in answers]
    assert outcomes == [True, True, True, -32011], outcomes


def test_http_media_types_in_any_case_and_an_accept_without_json_is_a_json_406(base_url):
    _, raw = new_key()
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    upper = _post(base_url, raw, ping, **{"Content-Type": "APPLICATION/JSON", "Accept": "Application/Json"})
    assert upper.status_code == 200 and upper.json()["id"] == 1
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for version in ("2025-11-25", "2026-07-28"):
        body = {**listing, "params": {"_meta": MODERN_META}} if version == "2026-07-28" else listing
        protocol = {"MCP-Protocol-Version": version, "Mcp-Method": "tools/list"}
        for accept in ("text/event-stream", "text/html", "application/json;q=0"):
            refused = _post(base_url, raw, body, Accept=accept, **protocol)
            assert refused.status_code == 406 and refused.headers["Content-Type"] == "application/json", (version, accept)
            assert "application/json" in refused.json()["error"]["message"]
        for accept in ("", "*/*", "application/json;q=0.9", "text/event-stream, application/json", "Application/*"):
            answered = _post(base_url, raw, body, Accept=accept, **protocol)
            assert answered.status_code == 200 and answered.json()["result"]["tools"], (version, accept, answered.text)
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer {raw}", **protocol}
        answered = requests.post(f"{base_url}/mcp", data=json.dumps(body), headers=sent, timeout=30)  # no Accept at all
        assert answered.status_code == 200 and answered.json()["result"]["tools"], (version, answered.text)


def test_http_a_resource_uri_with_too_many_query_fields_is_invalid_params(base_url):
    _, raw = new_key()
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "alg://verbs?" + "a=1&" * 1001}}
    error = _post(base_url, raw, body, **{"MCP-Protocol-Version": "2025-11-25"}).json()["error"]
    assert error["code"] == -32602 and "cannot be read: more fields" in error["message"], error


def test_a_client_that_leaves_mid_body_is_not_handed_to_the_sdk(settings):
    """Nothing to answer and nothing for the SDK to fail on (it logged an error with a traceback)."""
    import anyio

    from mcp_server.asgi import McpRouter

    router = McpRouter(django_app=None)
    router.running = True

    async def sdk(*args):
        raise AssertionError("the SDK was given a request whose client left")

    router.mcp_app = sdk
    incoming = iter([{"type": "http.request", "body": b'{"jsonrpc"', "more_body": True}, {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(incoming)

    async def send(message):
        sent.append(message)

    headers = [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer x"), (b"content-type", b"application/json")]
    headers.append((b"content-length", b"100"))
    scope = {"type": "http", "method": "POST", "path": settings.MCP_HTTP_PATH, "headers": headers}
    anyio.run(router._mcp, scope, receive, send)
    assert sent == []
