"""The MCP server keeps REST's policies: the per-key request rate (one budget for both transports), the JSON
input policy, strict ids, REST's error bodies intact, the failed-key throttle per real client address,
the key checked before anything else, and what REST says in headers (a memory stored without its vector).

The tool calls run in this process, in the test's transaction, as the server runs them in a worker thread."""

import json

import pytest
from django.core.cache import cache
from mcp import MCPError
from rest_framework import exceptions
from starlette.requests import Request

from agents.models import Scope
from feedback.models import Proposal
from learning.services.catalogue import verb_catalogue_load
from mcp_server.server import (
    THROTTLED,
    UNAUTHENTICATED,
    Outcome,
    call_tool_sync,
    error_body,
    http_key,
    resources_permitted_sync,
    validate_arguments,
)
from mcp_server.tools import TOOLS_BY_NAME
from tenants.context import tenant_request
from tests.conftest import CBU_CATALOGUE, make_client

pytestmark = pytest.mark.django_db

PROPOSE = {"action": "email.send", "reasoning": {"confidence": 0.8}}


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()
    yield
    cache.clear()


def as_the_server_runs(fn, *args) -> Outcome:
    """``fn(*args)`` as the server runs a call (its tenant transaction, REST's error body), in the test's transaction."""
    try:
        with tenant_request():
            return fn(*args)
    except MCPError:
        raise
    except Exception as exc:
        body = error_body(exc)
        if body is None:
            raise
        return Outcome(error=body)


def mcp_call(name: str, raw: str, arguments: dict, client: str = "test") -> Outcome:
    """One tools/call as the server runs it."""
    return as_the_server_runs(call_tool_sync, name, f"Bearer {raw}", client, arguments)


def test_tool_calls_share_the_keys_rest_request_rate(catalogue, settings):
    settings.API_KEY_RATE = "3/min"
    busy, calm = make_client(["resolve"], name="busy"), make_client(["resolve"], name="calm")
    assert [busy.post("/api/v1/resolve", {"text": "list all cbus"}, format="json").status_code for _ in range(2)] == [200, 200]
    assert mcp_call("resolve", busy.raw, {"text": "list all cbus"}).error is None  # the third of three
    with pytest.raises(MCPError) as refused:
        mcp_call("resolve", busy.raw, {"text": "list all cbus"})
    assert refused.value.code == THROTTLED
    assert refused.value.error.data["code"] == "throttled" and refused.value.error.data["wait"] > 0
    assert busy.post("/api/v1/resolve", {"text": "list all cbus"}, format="json").status_code == 429  # one budget
    assert mcp_call("resolve", calm.raw, {"text": "list all cbus"}).error is None  # per key


def test_no_request_rate_when_unset(catalogue, settings):
    settings.API_KEY_RATE = ""
    api = make_client(["resolve"])
    assert all(mcp_call("resolve", api.raw, {"text": "list all cbus"}).error is None for _ in range(5))


@pytest.mark.parametrize(
    "proposed_action, field, reason",
    [
        ({"a": 10**30}, "proposed_action.a", "An integer outside 64 bits."),
        ({"to": ["x", -(2**64)]}, "proposed_action.to[1]", "An integer outside 64 bits."),
        ({"a\x00b": 1}, "proposed_action", "A key contains a NUL character."),
        ({"a": "x\x00y"}, "proposed_action.a", "The value contains a NUL character."),
        ({"a": "x\ud800y"}, "proposed_action.a", "The value contains a lone UTF-16 surrogate."),
        ({"a": float("nan")}, "proposed_action.a", "Not a finite number."),
        ({"a": float("inf")}, "proposed_action.a", "Not a finite number."),
    ],
)
def test_arguments_pass_rests_input_policy_naming_the_field(proposed_action, field, reason):
    api = make_client([Scope.RESOLVE, Scope.FEEDBACK])
    outcome = mcp_call("propose_action", api.raw, {**PROPOSE, "proposed_action": proposed_action})
    assert outcome.error is not None, outcome.data
    assert outcome.error["code"] == "invalid" and outcome.error["http_status"] == 400
    assert outcome.error["fields"] == {field: [reason]}
    assert not Proposal.objects.exists()


def test_the_input_policy_refuses_what_rest_refuses_with_the_same_fields():
    api = make_client([Scope.RESOLVE, Scope.FEEDBACK])
    for proposed_action in ({"a": 10**30}, {"a\x00": 1}):
        rest = api.post("/api/v1/proposals", {**PROPOSE, "proposed_action": proposed_action}, format="json")
        mcp = mcp_call("propose_action", api.raw, {**PROPOSE, "proposed_action": proposed_action})
        assert rest.status_code == 400 and rest.json()["fields"] == mcp.error["fields"]


def test_nesting_deeper_than_rest_allows_is_refused_naming_the_argument(settings):
    tool = TOOLS_BY_NAME["propose_action"]
    nested = 1
    for _ in range(settings.API_MAX_JSON_DEPTH - 1):  # the arguments object is level 1, as a REST body is
        nested = {"n": nested}
    validate_arguments(tool, {**PROPOSE, "proposed_action": nested})
    with pytest.raises(exceptions.ValidationError) as err:
        validate_arguments(tool, {**PROPOSE, "proposed_action": {"n": nested}})
    assert list(err.value.detail) == ["proposed_action"]
    assert f"deeper than {settings.API_MAX_JSON_DEPTH}" in str(err.value.detail["proposed_action"][0])


def test_arguments_larger_than_rests_body_limit_are_refused_as_rest_refuses_the_body(settings):
    settings.API_MAX_BODY_BYTES = 4096
    api = make_client([Scope.RESOLVE, Scope.FEEDBACK])
    big = {**PROPOSE, "proposed_action": {"blob": "x" * 5000}}
    assert api.post("/api/v1/proposals", big, format="json").status_code == 413
    outcome = mcp_call("propose_action", api.raw, big)
    assert outcome.error is not None and outcome.error["http_status"] == 413, outcome
    assert outcome.error["code"] == "payload_too_large" and "proposed_action" in outcome.error["detail"]
    assert not Proposal.objects.exists()
    assert mcp_call("propose_action", api.raw, {**PROPOSE, "proposed_action": {"blob": "x" * 3000}}).error is None
    # the import tool takes what the import endpoint takes (its own, larger limit)
    rows = json.dumps([{"phrase": f"list the units number {i}", "verb": "cbu.list"} for i in range(200)])
    gov = make_client([s.value for s in Scope], name="importer")
    verb_catalogue_load(entries=CBU_CATALOGUE)
    imported = mcp_call("import_phrases", gov.raw, {"format": "json", "content": rows})
    assert imported.error is None and imported.data["imported"] == 200, imported


def test_a_nul_in_an_argument_name_is_refused():
    with pytest.raises(exceptions.ValidationError) as err:
        validate_arguments(TOOLS_BY_NAME["resolve"], {"text": "x", "us\x00er_id": "alice"})
    assert list(err.value.detail) == ["arguments"]


@pytest.mark.parametrize("value", ["7", 7.0, True, 2**63])
def test_proposal_ids_are_integers_never_coerced(value):
    with pytest.raises(exceptions.ValidationError) as err:
        validate_arguments(TOOLS_BY_NAME["get_proposal"], {"proposal": value})
    assert "proposal" in err.value.detail
    assert validate_arguments(TOOLS_BY_NAME["get_proposal"], {"proposal": 7}) == {"proposal": 7}


def test_a_rest_error_body_keeps_its_own_status_and_adds_the_http_code():
    verb_catalogue_load(entries=CBU_CATALOGUE)
    api = make_client([Scope.RESOLVE, Scope.FEEDBACK])
    bodies = []
    for via in ("rest", "mcp"):
        asked = mcp_call("resolve", api.raw, {"text": "list all cbus", "user_id": "alice"}).data
        assert asked["outcome"] == "ambiguous", asked
        rid, verb = asked["request_id"], asked["options"][0]["verb"]
        assert mcp_call("abandon_options", api.raw, {"request_id": rid, "reason": "timeout", "user_id": "alice"}).error is None
        select = {"selected_verb": verb, "user_id": "alice"}
        if via == "rest":
            response = api.post(f"/api/v1/disambiguations/{rid}/select", select, format="json")
            assert response.status_code == 409
            bodies.append(response.json())
        else:
            bodies.append(mcp_call("select_option", api.raw, {"request_id": rid, **select}).error)
    rest, mcp = bodies
    assert rest["status"] == "abandoned"
    assert mcp == {**rest, "http_status": 409}


def test_without_a_status_of_its_own_status_is_the_http_code():
    body = error_body(exceptions.NotFound())
    assert body["status"] == body["http_status"] == 404


def test_a_wrong_key_is_refused_before_the_tool_name_is_looked_at():
    with pytest.raises(MCPError) as wrong:
        mcp_call("no_such_tool", "alg_00000000_wrong", {})
    assert wrong.value.code == UNAUTHENTICATED
    api = make_client([Scope.RESOLVE])
    with pytest.raises(MCPError) as unknown:
        mcp_call("no_such_tool", api.raw, {})
    assert unknown.value.code == -32602


def test_resources_are_listed_only_to_keys_whose_scopes_read_them():
    def listed(scopes):
        with tenant_request():
            return set(resources_permitted_sync(f"Bearer {make_client(scopes, name='-'.join(scopes)).raw}", "test").data)

    assert listed([Scope.FEEDBACK]) == set()
    assert listed([Scope.RESOLVE]) == {"alg://verbs", "alg://actions", "alg://actions/{name}"}
    with pytest.raises(MCPError) as wrong, tenant_request():
        resources_permitted_sync("Bearer alg_00000000_wrong", "test")
    assert wrong.value.code == UNAUTHENTICATED


def _http_ctx(remote: str, forwarded: str | None = None, key: str = "alg_00000000_wrong"):
    headers = [(b"authorization", f"Bearer {key}".encode())]
    if forwarded:
        headers.append((b"x-forwarded-for", forwarded.encode()))
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "client": (remote, 40000)}

    class Ctx:
        request = Request(scope)

    return Ctx()


def test_behind_a_trusted_proxy_each_client_has_its_own_failed_key_bucket(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "3/min"}}
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert http_key(_http_ctx("10.0.0.5", "203.0.113.7"))[1] == "203.0.113.7"
    assert http_key(_http_ctx("192.0.2.9", "203.0.113.7"))[1] == "192.0.2.9"  # not a proxy: the header is ignored

    def attempt(forwarded: str, n: int) -> int:
        authorization, client = http_key(_http_ctx("10.0.0.5", forwarded, key=f"alg_{n:08x}_wrong"))
        with pytest.raises(MCPError) as err:
            mcp_call("resolve", authorization.split()[1], {"text": "x"}, client=client)
        return err.value.code

    assert [attempt("203.0.113.7", n) for n in range(4)] == [UNAUTHENTICATED] * 3 + [THROTTLED]
    assert attempt("198.51.100.4", 10) == UNAUTHENTICATED  # another client behind the same proxy


@pytest.mark.parametrize("embedder_down", [True, False])
def test_observe_memory_says_whether_the_memory_waits_for_its_vector(request, embedder_down):
    if embedder_down:
        request.getfixturevalue("failing_embedder")
    api = make_client([Scope.RESOLVE, Scope.FEEDBACK])
    turn = {
        "user_id": "alice",
        "user_message": "How do I rotate the application logs on the staging servers?",
        "assistant_message": "Run logrotate nightly with the app config.",
    }
    result = mcp_call("observe_memory", api.raw, turn).data
    assert result["decision"] == "saved" and result["embedding_pending"] is embedder_down


def test_a_write_tool_with_an_idempotency_key_runs_once_and_shares_rests_keys(catalogue):
    from learning.models import LearnedPhrase

    api = make_client(["resolve", "feedback"])
    body = {"text": "show me every client business unit", "verb": "cbu.list", "user_id": "alice"}

    def confirm(key, arguments=body):
        try:
            with tenant_request():
                return call_tool_sync("confirm_resolution", f"Bearer {api.raw}", "test", arguments, key)
        except Exception as exc:
            return Outcome(error=error_body(exc))

    first = confirm("k-1")
    assert first.error is None and not first.replayed
    again = confirm("k-1")
    assert again.replayed and again.data == first.data
    assert LearnedPhrase.objects.get(user_id="alice").occurrence_count == 1
    assert confirm("k-2").data["phrase"]["occurrence_count"] == 2
    reused = confirm("k-1", {**body, "text": "list the units"})
    assert reused.error["http_status"] == 409 and reused.error["code"] == "idempotency_key_reused"
    assert list(reused.error["fields"]) == ["_meta.idempotency_key"]  # where the MCP call sent it: it has no header
    bad = confirm("")
    assert bad.error["http_status"] == 400 and "_meta.idempotency_key" in bad.error["fields"]
    # REST's Idempotency-Key is the same store: the MCP call's key answers a REST retry's 409 (another request).
    rest = api.post("/api/v1/resolutions/confirm", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert rest.status_code == 409 and rest.json()["code"] == "idempotency_key_reused"
    assert list(rest.json()["fields"]) == ["Idempotency-Key"]


def test_a_replayed_tool_call_says_embedding_pending_when_the_first_did(failing_embedder):
    api = make_client(["resolve", "feedback"])
    turn = {
        "user_id": "alice",
        "user_message": "How do I rotate the application logs on the staging servers?",
        "assistant_message": "Run logrotate nightly with the app config.",
    }

    def observe():
        with tenant_request():
            return call_tool_sync("observe_memory", f"Bearer {api.raw}", "test", turn, "observe-1")

    first, again = observe(), observe()
    assert first.embedding_pending and not first.replayed
    assert again.replayed and again.embedding_pending and again.data == first.data


# --- parity with REST where the two used to differ ---


def test_an_unknown_argument_is_refused_in_rests_words(catalogue):
    key = make_client([s.value for s in Scope], name="gov")
    rest = key.post("/api/v1/resolve", {"text": "list all cbus", "bogus": 1}, format="json")
    called = mcp_call("resolve", key.raw, {"text": "list all cbus", "bogus": 1})
    assert called.error["fields"] == rest.json()["fields"] == {"bogus": ["Unknown field."]}


def test_a_request_id_is_read_as_rests_path_reads_it(cbus):
    key = make_client([s.value for s in Scope], name="gov")
    for rid in ("not-a-uuid", "x" * 70, "123"):
        rest = key.post(f"/api/v1/disambiguations/{rid}/select", {"selected_verb": "cbu.list"}, format="json")
        called = mcp_call("select_option", key.raw, {"request_id": rid, "selected_verb": "cbu.list"})
        assert called.error["http_status"] == rest.status_code == 404, (rid, called.error)
    rid = mcp_call("resolve", key.raw, {"text": "list all cbus", "user_id": "alice"}).data["request_id"]
    called = mcp_call("abandon_options", key.raw, {"request_id": f" {rid} ", "reason": "timeout"})
    assert called.error is not None and called.error["http_status"] == 404  # not trimmed into another id
    assert mcp_call("abandon_options", key.raw, {"request_id": rid, "reason": "timeout"}).error is None


def test_block_phrase_says_whether_the_block_is_new(catalogue):
    key = make_client([s.value for s in Scope], name="gov")
    first = mcp_call("block_phrase", key.raw, {"phrase": "delete every unit", "verb": "cbu.list"})
    again = mcp_call("block_phrase", key.raw, {"phrase": "delete every unit", "verb": "cbu.list"})
    assert (first.data["created"], again.data["created"]) == (True, False)
