"""POST /api/v1/resolve: answers, degraded mode, bad input, and the schema and docs."""

import pytest

from common.timing import header_parse
from learning.models import LearnedPhrase, Verb
from learning.services.phrases import learned_phrase_upsert

pytestmark = pytest.mark.django_db
URL = "/api/v1/resolve"


def test_resolve_answers_verb_and_candidates(api, catalogue):
    r = api.post(URL, {"text": "list all cbus", "user_id": "alice"}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["outcome"] == "resolved"
    assert body["verb"] == "cbu.list"
    assert body["degraded"] is False
    assert "options" not in body
    first = body["candidates"][0]
    assert set(first) >= {"verb", "score", "source", "matched_phrase", "description"}
    assert len(body["request_id"]) == 36


def test_ambiguous_answer_carries_options(api, catalogue, settings):
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.99}
    r = api.post(URL, {"text": "remove a client unit"}, format="json")
    body = r.json()
    assert body["outcome"] == "ambiguous"
    assert body["verb"] is None
    assert body["options"] and set(body["options"][0]) == {"verb", "display_name", "example", "score"}


def test_limit_and_domain(api, catalogue):
    r = api.post(URL, {"text": "cbu", "limit": 1, "domain": "cbu"}, format="json")
    assert r.status_code == 200
    assert len(r.json()["candidates"]) <= 1


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"text": ""}, "text"),
        ({"text": "   "}, "text"),
        ({"text": "\u200b\u200d\ufeff"}, "text"),  # only invisible characters
        ({"text": "x" * 2001}, "text"),
        ({}, "text"),
        ({"text": "list", "domain": "nope"}, "domain"),
        ({"text": "list", "user_id": "bad id with spaces"}, "user_id"),
        ({"text": "list", "user_id": "x" * 200}, "user_id"),
        ({"text": "list", "limit": 0}, "limit"),
        ({"text": "list", "limit": "many"}, "limit"),
        ({"text": ["list"]}, "text"),
    ],
)
def test_bad_input_names_the_field(api, catalogue, payload, field):
    r = api.post(URL, payload, format="json")
    assert r.status_code == 400, r.content
    body = r.json()
    assert field in body["fields"], body
    assert body["fields"][field][0]
    assert body["detail"]


def test_non_json_body(api, catalogue):
    r = api.post(URL, "text=hello", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
    r = api.post(URL, "{not json", content_type="application/json")
    assert r.status_code == 400
    assert "body" in r.json()["fields"]


def test_degraded_over_http_is_200(api, catalogue, failing_embedder):
    r = api.post(URL, {"text": "list all cbus"}, format="json")
    assert r.status_code == 200
    assert r.json()["degraded"] is True
    assert r.json()["verb"] == "cbu.list"


def test_bad_requests_write_nothing(api, catalogue):
    counts = (Verb.objects.count(), LearnedPhrase.objects.count())
    api.post(URL, {"text": ""}, format="json")
    api.post(URL, "{", content_type="application/json")
    assert (Verb.objects.count(), LearnedPhrase.objects.count()) == counts


def test_schema_and_docs_work_offline(client):
    r = client.get("/api/schema/")
    assert r.status_code == 200
    assert b"/api/v1/resolve" in r.content
    r = client.get("/api/docs/")
    assert r.status_code == 200
    assert b"drf_spectacular_sidecar" in r.content or b"swagger-ui" in r.content
    assert b"cdn.jsdelivr" not in r.content


def _server_timing(response) -> dict:
    return header_parse(response["Server-Timing"])


def test_a_resolve_answer_says_where_its_time_went(api, catalogue):
    r = api.post(URL, {"text": "show me every client business unit", "user_id": "alice"}, format="json")
    assert r.status_code == 200
    spans = _server_timing(r)
    assert {"exact", "embed", "tiers", "decide", "record", "total"} <= set(spans)
    assert all(ms >= 0.0 for ms in spans.values())
    assert spans["total"] >= sum(ms for name, ms in spans.items() if name != "total")


def test_a_trusted_exact_phrase_is_answered_without_an_embedding_and_the_timing_shows_it(api, catalogue):
    learned_phrase_upsert(phrase="my units please", verb=catalogue["cbu.list"], user_id="alice")
    r = api.post(URL, {"text": "my units please", "user_id": "alice"}, format="json")
    assert r.json()["verb"] == "cbu.list"
    assert set(_server_timing(r)) == {"exact", "record", "total"}


def test_errors_carry_the_timing_header_too_and_the_setting_turns_it_off(api, catalogue, settings):
    assert "total" in _server_timing(api.post(URL, {"text": ""}, format="json"))
    settings.SERVER_TIMING = False
    from rest_framework.test import APIClient

    fresh = APIClient()  # middleware is loaded per client handler
    fresh.credentials(HTTP_AUTHORIZATION=f"Bearer {api.raw}")
    r = fresh.post(URL, {"text": "list all cbus"}, format="json")
    assert r.status_code == 200
    assert "Server-Timing" not in r
