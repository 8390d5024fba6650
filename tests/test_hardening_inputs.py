"""The one input policy, on every endpoint: each reproduced 5xx answers 400 now.

Bodies go through common.parsers.LimitedJSONParser (NUL, lone surrogates, non-finite and 64-bit-overflowing
numbers, depth), query strings and paths through common.middleware.InputPolicyMiddleware, and request
serializers refuse unknown fields and values of the wrong JSON type (common.fields).
"""

import json

import pytest
from django.db import DataError, InterfaceError, OperationalError

from common.api import database_unreachable
from tests.conftest import reviewer_client, reviewer_user

SURROGATE = '"\\ud800"'  # JSON text for a lone surrogate
NUL = '"a\\u0000b"'  # JSON text for a string holding NUL

# (path, JSON body text with {bad} where the bad value goes)
OBJECT_FIELDS = [
    ("/api/v1/proposals", '{"action": "email.send", "proposed_action": {"to": {bad}}, "reasoning": {"confidence": 0.5}}'),
    ("/api/v1/proposals", '{"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": 0.5, "why": {bad}}}'),
    ("/api/v1/executions", '{"action": "email.send", "params": {"to": {bad}}, "confidence": 0.5, "success": true}'),
    ("/api/v1/executions", '{"action": "email.send", "result": {"x": {bad}}, "confidence": 0.5, "success": true}'),
    ("/api/v1/overrides", '{"action": "email.send", "original_action": {}, "corrected_action": {"to": {bad}}}'),
    ("/api/v1/proposals/1/modify", '{"modified_action": {"to": {bad}}}'),
    ("/api/v1/executions/1/review", '{"outcome": "corrected", "corrected_action": {"to": {bad}}}'),
    (
        "/api/v1/disambiguations/00000000-0000-0000-0000-000000000000/select",
        '{"selected_verb": "cbu.list", "args": {"a": {bad}}}',
    ),
    ("/api/v1/memories/observe", '{"user_id": "u1", "message": "remember that I like tea", "meta": {"filters": {"k": {bad}}}}'),
    ("/api/v1/memories/retrieve", '{"user_id": "u1", "query": "tea", "filters": {"metadata": {"k": {bad}}}}'),
    ("/api/v1/memories/search", '{"user_id": "u1", "query": "tea", "filters": {"metadata": {"k": {bad}}}}'),
]

CHOICE_FIELDS = [
    ("/api/v1/disambiguations/00000000-0000-0000-0000-000000000000/abandon", '{"reason": {bad}}'),
    ("/api/v1/learning/import", '{"format": {bad}, "content": "a,b"}'),
    ("/api/v1/learning/import", '{"format": "csv", "content": "a,b", "scope": {bad}}'),
    ("/api/v1/blocklist", '{"phrase": "x", "verb": "cbu.list", "scope": {bad}}'),
    ("/api/v1/memories/outcome", '{"user_id": "u1", "memory_ids": [1], "outcome": {bad}}'),
    ("/api/v1/memories/search", '{"user_id": "u1", "query": "tea", "mode": {bad}}'),
    ("/api/v1/executions/1/review", '{"outcome": {bad}}'),
]


def _post(client, path, body: str):
    return client.post(path, data=body.encode("utf-8"), content_type="application/json")


def _assert_refused(response):
    assert response.status_code == 400, (response.status_code, response.content[:300])
    body = response.json()
    assert body["detail"] and isinstance(body["fields"], dict)


@pytest.mark.parametrize(("path", "template"), OBJECT_FIELDS + CHOICE_FIELDS)
def test_lone_surrogate_anywhere_in_a_body_is_400(gov_api, catalogue, path, template):
    response = _post(gov_api, path, template.replace("{bad}", SURROGATE))
    _assert_refused(response)
    assert response.json()["code"] == "invalid"
    assert "surrogate" in response.json()["detail"]
    field = next(iter(response.json()["fields"]))
    assert field != "body" and "{bad}".join(template.split("{bad}")[:1]).count(field.split(".")[0].split("[")[0]) == 1


@pytest.mark.parametrize(("path", "template"), OBJECT_FIELDS)
def test_nul_anywhere_in_a_body_is_400(gov_api, catalogue, path, template):
    response = _post(gov_api, path, template.replace("{bad}", NUL))
    _assert_refused(response)
    assert "NUL" in response.json()["detail"]


def test_surrogate_in_a_key_is_400(gov_api, catalogue):
    _assert_refused(
        _post(gov_api, "/api/v1/executions", '{"action": "a.b", "params": {"\\udfff": 1}, "confidence": 0.5, "success": true}')
    )


@pytest.mark.parametrize("number", ["1e400", "-1e400", "9223372036854775808", "-9223372036854775809", "NaN", "Infinity"])
def test_non_finite_and_out_of_range_numbers_are_400(gov_api, catalogue, number):
    body = '{"action": "email.send", "params": {"n": NUMBER}, "confidence": 0.5, "success": true}'.replace("NUMBER", number)
    _assert_refused(_post(gov_api, "/api/v1/executions", body))


@pytest.mark.parametrize("path", ["/api/v1/learning/import", "/api/v1/resolve", "/api/v1/memories/observe"])
def test_100000_nested_brackets_are_400_everywhere(gov_api, catalogue, path):
    response = _post(gov_api, path, "[" * 100_000 + "]" * 100_000)
    _assert_refused(response)


# The imported file is parsed a second time (learning/importing.py): its texts follow the same policy.
IMPORT_CONTENTS = [
    ("yaml", "a\u0015"),  # a character YAML does not allow (its reader refuses it in the loader's constructor)
    ("json", '[{"phrase": "a", "verb": "\\ud800"}]'),  # lone surrogate in the file's JSON, as the verb
    ("yaml", '- {phrase: "a\\ud800", verb: cbu.list}'),  # ... in YAML, as the phrase
    ("csv", "phrase,verb\na\ud800,cbu.list\n"),
    ("json", "[" * 5000 + "]" * 5000),  # nesting that overflows the decoder's recursion
    ("yaml", "[" * 2000 + "]" * 2000),
    ("yaml", "- {phrase: !!binary aGVsbG8=, verb: cbu.list}"),  # bytes are not text
]


@pytest.mark.parametrize(("fmt", "content"), IMPORT_CONTENTS)
def test_what_an_imported_file_holds_is_checked_too(gov_api, catalogue, fmt, content):
    body = json.dumps({"format": fmt, "content": content, "dry_run": True})
    _assert_refused(_post(gov_api, "/api/v1/learning/import", body))


@pytest.mark.parametrize("charset", ["base64", "zlib", "rot13", "hex", "undefined"])
def test_a_body_in_a_charset_that_cannot_be_read_is_400(gov_api, catalogue, charset):
    response = gov_api.post("/api/v1/resolve", data=b'{"text": "x"}', content_type=f"application/json; charset={charset}")
    _assert_refused(response)


def test_import_still_takes_bodies_larger_than_the_api_limit(gov_api, catalogue, settings):
    settings.API_MAX_BODY_BYTES = 1000
    content = "phrase,verb\n" + "".join(f"list all cbus number {i},cbu.list\n" for i in range(100))
    response = gov_api.post("/api/v1/learning/import", {"format": "csv", "content": content, "dry_run": True}, format="json")
    assert response.status_code == 200, response.content[:300]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/proposals",
        "/api/v1/executions",
        "/api/v1/feedback-records",
        "/api/v1/mistake-patterns",
        "/api/v1/learning/candidates",
    ],
)
@pytest.mark.parametrize(
    "offset", ["9223372036854775808", "9223372036854775807", "1000001", "-1", "1e3", "99999999999999999999999"]
)
def test_huge_offsets_are_400(gov_api, catalogue, path, offset):
    response = gov_api.get(path, {"offset": offset})
    _assert_refused(response)
    assert "offset" in response.json()["fields"]


def test_an_offset_within_the_limit_answers_an_empty_page(gov_api, catalogue):
    response = gov_api.get("/api/v1/proposals", {"offset": "1000000"})
    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("status", ["AAA", "\x00", "applied\x00"])
def test_transitions_refuse_an_unknown_status(gov_api, status):
    _assert_refused(gov_api.get("/api/v1/autonomy/transitions", {"status": status}))


def test_transitions_filter_by_a_known_status(gov_api):
    assert gov_api.get("/api/v1/autonomy/transitions", {"status": "applied"}).status_code == 200


def test_nul_in_a_query_string_or_path_is_400_everywhere(gov_api, catalogue, client):
    for path in ["/api/v1/proposals?status=%00", "/api/v1/learning/candidates?user_id=%00", "/api/v1/actions?x%00=1"]:
        _assert_refused(gov_api.get(path))
    assert gov_api.get("/api/v1/actions/a%00b/consult?confidence=0.5").status_code == 400
    assert client.get("/admin/learning/learningcandidate/?q=%00").status_code == 400


@pytest.mark.parametrize("value", ["false", "true", '"0.5"', "null", "[]"])
def test_booleans_are_not_numbers(api, catalogue, value):
    body = '{"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": VALUE}}'.replace("VALUE", value)
    response = _post(api, "/api/v1/proposals", body)
    _assert_refused(response)
    assert "reasoning.confidence" in response.json()["fields"]


def test_boolean_confidence_refused_on_executions_and_consult(api, catalogue):
    body = {"action": "email.send", "confidence": False, "success": True}
    _assert_refused(api.post("/api/v1/executions", body, format="json"))
    _assert_refused(api.get("/api/v1/actions/email.send/consult", {"confidence": "false"}))
    _assert_refused(api.post("/api/v1/executions", {**body, "confidence": 0.5, "success": 1}, format="json"))


def test_reasoning_keeps_its_own_keys(api, catalogue):
    body = {"action": "email.send", "proposed_action": {"to": "a@b"}, "reasoning": {"confidence": 0.7, "why": "asked"}}
    response = api.post("/api/v1/proposals", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["reasoning"] == {"confidence": 0.7, "why": "asked"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/resolve", {"text": "list all cbus", "usr_id": "alice"}),
        ("/api/v1/resolutions/correct", {"text": "x", "wrong_verb": "cbu.list", "correct_verb": "cbu.create", "userid": "a"}),
        ("/api/v1/executions", {"action": "email.send", "confidence": 0.5, "success": True, "extra": 1}),
        ("/api/v1/blocklist", {"phrase": "x", "verb": "cbu.list", "scpe": "user"}),
        ("/api/v1/memories/observe", {"user_id": "u1", "message": "I like tea with milk please", "x": 1}),
        ("/api/v1/autonomy/transitions/1/approve", {"note": "typo"}),
    ],
)
def test_unknown_body_fields_are_refused_naming_them(gov_api, catalogue, path, body):
    # autonomy decisions take a human reviewer's token; every other path the agent's governance key
    caller = reviewer_client(reviewer_user("rita", "approve_autonomytransition")) if "/transitions/" in path else gov_api
    response = caller.post(path, body, format="json")
    _assert_refused(response)
    unknown = (set(body) - {"text", "wrong_verb", "correct_verb", "action", "confidence", "success", "phrase", "verb"}) - {
        "user_id",
        "message",
    }
    assert unknown <= set(response.json()["fields"]), response.json()


def test_unknown_query_parameters_are_refused(gov_api, catalogue):
    _assert_refused(gov_api.get("/api/v1/proposals", {"stauts": "pending"}))
    _assert_refused(gov_api.get("/api/v1/learning/candidates", {"limt": "5"}))
    # endpoints that take no query parameters refuse any, too
    refused = gov_api.get("/api/v1/actions", {"confidence": "nan"})
    _assert_refused(refused)
    assert "confidence" in refused.json()["fields"]
    _assert_refused(gov_api.get("/api/v1/proposals/1", {"verbose": "1"}))
    _assert_refused(gov_api.get("/api/v1/executions/1", {"verbose": "1"}))
    assert gov_api.get("/api/v1/actions").status_code == 200


def test_schema_closes_request_bodies(gov_api):
    schema = gov_api.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    closed = [name for name, c in components.items() if name.endswith("Request") and "properties" in c]
    assert closed and all(components[name]["additionalProperties"] is False for name in closed)


def test_database_errors_are_503_only_when_unreachable():
    class Cause(Exception):
        def __init__(self, sqlstate):
            self.sqlstate = sqlstate

    def wrapped(cls, sqlstate):
        exc = cls("x")
        exc.__cause__ = Cause(sqlstate)
        return exc

    assert database_unreachable(wrapped(OperationalError, None))  # connection refused / lost: no SQLSTATE
    assert database_unreachable(wrapped(OperationalError, "08006"))
    assert database_unreachable(wrapped(OperationalError, "57P01"))  # terminated by administrator
    assert database_unreachable(InterfaceError("closed"))
    assert not database_unreachable(wrapped(OperationalError, "57014"))  # statement timeout: not unreachable
    assert not database_unreachable(wrapped(DataError, "22P05"))  # untranslatable character


def test_a_value_the_database_refuses_is_400_not_503(gov_api, catalogue, monkeypatch):
    from feedback import api as feedback_api

    def refuse(**kwargs):
        raise DataError("integer out of range")

    monkeypatch.setattr(feedback_api, "execution_create", refuse)
    body = {"action": "email.send", "confidence": 0.5, "success": True}
    response = gov_api.post("/api/v1/executions", body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_value"


def test_json_dumps_sanity():
    assert json.loads(SURROGATE) == "\ud800"


def _wsgi_call(app, content_type: str, query: str = "x=1"):
    from wsgiref.util import setup_testing_defaults

    environ = {"PATH_INFO": "/api/v1/actions", "QUERY_STRING": query, "CONTENT_TYPE": content_type}
    setup_testing_defaults(environ)
    seen = {}

    def start_response(status, headers):
        seen["status"] = status

    body = b"".join(app(environ, start_response))
    return seen["status"], body


@pytest.mark.parametrize("charset", ["base64", "zlib", "rot13", "undefined", "punycode"])
def test_the_servers_answer_400_for_a_charset_django_fails_on_before_its_handlers(charset):
    """Django decodes the query string with the request's charset while it builds the request: a codec that is no
    text encoding, or one that fails on the query string, fails there, before middleware or error handlers. The
    WSGI and ASGI guards answer 400."""
    import asyncio

    from django.core.handlers.asgi import ASGIHandler
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_started
    from django.db import close_old_connections

    from common.gateway import asgi_guard, wsgi_guard

    # Django's handler closes stale connections when a request starts; the test's own must stay (as the test client does)
    request_started.disconnect(close_old_connections)
    try:
        with pytest.raises((LookupError, UnicodeError)):  # what the guard is for: Django alone
            _wsgi_call(WSGIHandler(), f"text/plain; charset={charset}")
    finally:
        request_started.connect(close_old_connections)
    status, body = _wsgi_call(wsgi_guard(WSGIHandler()), f"text/plain; charset={charset}")
    assert status.startswith("400") and f"'{charset}'" in json.loads(body)["fields"]["content_type"][0]

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/actions",
        "query_string": b"x=1",
        "headers": [(b"content-type", f"text/plain; charset={charset}".encode())],
    }
    if charset in ("undefined", "punycode"):
        return  # Django's ASGI request reads the query string as UTF-8 text: only a non-text codec fails there
    asyncio.run(asgi_guard(ASGIHandler())(scope, receive, send))
    assert sent[0]["status"] == 400 and json.loads(sent[1]["body"])["code"] == "unsupported_charset"


@pytest.mark.parametrize(
    "content_type", ["text/plain; charset=utf-8", "application/json", "text/plain; charset=bogus", "x; charset=utf-16", ""]
)
def test_the_guard_lets_readable_and_unknown_charsets_through(content_type):
    from common.gateway import charset_problem

    assert charset_problem(content_type, b"x=1&y=%FF") is None
    assert charset_problem(content_type, "x=1&y=%FF") is None  # as an ASGI server hands it over


def test_the_guard_answers_what_it_cannot_read_and_leaves_utf8_queries_to_django():
    from common.gateway import charset_problem

    assert "cannot be read" in charset_problem("text/plain; charset*=nosuchcodec''abc", b"x=1")  # RFC 2231 value
    assert "not a valid name" in charset_problem("text/plain; charset=utf\x00-8".replace("\\x00", "\x00"), b"x=1")
    many = "&".join(f"f{i}=1" for i in range(2000)).encode()  # too many fields: Django answers that itself (400)
    assert charset_problem("text/plain; charset=utf-8", many) is None


def test_the_asgi_guard_leaves_mcp_to_the_mcp_server():
    import asyncio

    from common.gateway import asgi_guard

    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    scope = {
        "type": "http",
        "path": "/mcp",
        "query_string": b"x=1",
        "headers": [(b"content-type", b"text/plain; charset=base64")],
    }
    asyncio.run(asgi_guard(app)(scope, None, None))
    assert reached == ["/mcp"]


def test_the_wsgi_application_is_guarded():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; os.environ['DEBUG'] = '1';"
        "from config.wsgi import application; from tests.test_hardening_inputs import _wsgi_call;"
        "print(_wsgi_call(application, 'text/plain; charset=base64')[0])"
    )
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "400 Bad Request", result.stderr[-2000:]


def test_an_error_quoting_a_huge_value_is_cut(gov_api):
    """DRF quotes a refused choice ('"<value>" is not a valid choice.'); the error body does not echo 50 kB back."""
    from common.api import MAX_ERROR_TEXT

    response = gov_api.get("/api/v1/learning/stats", {"time_range": "x" * 50_000})
    body = response.json()
    assert response.status_code == 400 and list(body["fields"]) == ["time_range"]
    reason = body["fields"]["time_range"][0]
    assert len(reason) == MAX_ERROR_TEXT and reason.endswith("…") and reason.startswith('"xxx')
    assert body["detail"] == f"time_range: {reason}"
    small = gov_api.get("/api/v1/learning/stats", {"time_range": "fortnight"}).json()
    assert small["fields"]["time_range"] == ['"fortnight" is not a valid choice.']


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_a_transaction_rolled_back_by_a_concurrent_one_is_503_retry_not_500(gov_api, catalogue, monkeypatch, sqlstate):
    """A deadlock or serialization failure (PostgreSQL raised it: here by its SQLSTATE) stored nothing and succeeds
    when sent again: 503 with Retry-After, never a 500."""
    from django.db import connection

    from feedback import api as feedback_api
    from feedback.models import Execution

    def collide(**kwargs):
        with connection.cursor() as cursor:
            cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'collided' USING ERRCODE = '{sqlstate}'; END $$")

    monkeypatch.setattr(feedback_api, "execution_create", collide)
    body = {"action": "email.send", "confidence": 0.5, "success": True}
    response = gov_api.post("/api/v1/executions", body, format="json")
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["code"] == "retry" and "retry it" in response.json()["detail"]
    assert not Execution.objects.exists()


def test_a_key_given_twice_in_one_object_is_400_not_the_last_one(gov_api, catalogue):
    from feedback.models import Execution
    from learning.models import LearnedPhrase

    raw = '{"text": "spin up a unit", "verb": "cbu.delete", "verb": "cbu.create", "user_id": "alice"}'
    answer = gov_api.post("/api/v1/resolutions/confirm", raw, content_type="application/json")
    assert answer.status_code == 400 and "appears twice" in answer.json()["detail"], answer.content
    nested = '{"action": "email.send", "params": {"n": 1, "n": 2}, "confidence": 0.5, "success": true}'
    answer = _post(gov_api, "/api/v1/executions", nested)
    assert answer.status_code == 400 and "'n' appears twice" in answer.json()["detail"], answer.content
    assert not LearnedPhrase.objects.exists() and not Execution.objects.exists()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/memories/retrieve", {"user_id": "alice", "query": "\x1f" + "x" * 2000}, "query"),
        ("/api/v1/resolve", {"text": "list all cbus" + " " * 2000}, "text"),
        (
            "/api/v1/memories/observe",
            {"user_id": "u1", "user_message": "tea", "assistant_message": "ok", "meta": {"topic": " " + "t" * 200}},
            "meta.topic",
        ),
        ("/api/v1/memories/search", {"user_id": "u1", "query": "tea", "filters": {"tags": ["t" * 60 + " "]}}, "filters.tags"),
    ],
)
def test_text_longer_than_its_field_as_sent_is_400_before_trimming(api, catalogue, settings, path, body, field):
    """The schema's maxLength counts the text as sent: whitespace the field trims does not let a longer one through."""
    assert settings.RESOLVE_MAX_TEXT_LENGTH == 2000
    response = api.post(path, body, format="json")
    assert response.status_code == 400, response.content
    answer = response.json()
    assert answer["code"] == "invalid" and list(answer["fields"]) == [field], answer
    assert "no more than" in answer["fields"][field][0]


def test_a_query_parameter_longer_than_it_takes_as_sent_is_400(api):
    response = api.get("/api/v1/proposals", {"action": "a" * 100 + " "})
    assert response.status_code == 400 and response.json()["fields"] == {
        "action": ["Ensure this field has no more than 100 characters."]
    }, response.content
    assert api.get("/api/v1/proposals", {"action": " email.send "}).status_code == 200


@pytest.mark.parametrize("value", [1, 0, True, -1])
def test_a_request_id_must_be_a_string_not_a_number_read_as_a_uuid(api, catalogue, value):
    """DRF reads an integer as the UUID of that number (``true`` as ...0001); a JSON number is no request id."""
    body = {"text": "show my units", "verb": "cbu.list", "user_id": "alice", "request_id": value}
    response = api.post("/api/v1/resolutions/confirm", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid"
    assert response.json()["fields"] == {"request_id": ["Expected a string."]}
