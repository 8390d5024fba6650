"""The OpenAPI schema generates, validates, and has no warnings (warnings are errors)."""

import json
import re

from django.core.management import call_command
from jsonschema import Draft4Validator


def test_schema_generates_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    text = target.read_text()
    assert "/api/v1/resolve" in text
    assert "ApiKey" in text


def test_path_parameters_are_the_paths_own(tmp_path):
    """Every path parameter names a template expression of its path, and every expression is declared: a client
    generated from the schema must not be asked for a ``pk`` that ``/proposals/{id}`` has no place for."""
    target = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    schema = json.loads(target.read_text())
    mismatched = {}
    for path, operations in schema["paths"].items():
        expressions = set(re.findall(r"{(\w+)}", path))
        for method, operation in operations.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            if declared != expressions:
                mismatched[f"{method.upper()} {path}"] = sorted(declared)
    assert mismatched == {}
    proposal = schema["paths"]["/api/v1/proposals/{id}"]["get"]["parameters"]
    assert [(p["name"], p["schema"]["type"], p["required"]) for p in proposal] == [("id", "integer", True)]


def _documented(client, path: str, method: str) -> set[str]:
    schema = client.get("/api/schema/", {"format": "json"}).json()
    return set(schema["paths"][path][method]["responses"])


def test_a_reused_idempotency_key_and_a_too_large_body_are_documented_answers(api, settings):
    """What every agent write can answer whatever its view declares is in the schema: 409 for an Idempotency-Key
    sent with another request (memories/retrieve declared no 409), 413 for a body over the limit."""
    retrieve = "/api/v1/memories/retrieve"
    first = api.post(retrieve, {"user_id": "alice", "query": "rotate logs"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    reused = api.post(retrieve, {"user_id": "alice", "query": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 200 and reused.status_code == 409
    assert reused.json()["code"] == "idempotency_key_reused" and list(reused.json()["fields"]) == ["Idempotency-Key"]
    assert {"200", "409"} <= _documented(api, retrieve, "post")

    plain = api.generic("POST", "/api/v1/resolve", b"text=list all cbus", content_type="text/plain")
    assert plain.status_code == 415 and plain.json()["code"] == "unsupported_media_type" and plain.json()["detail"]
    assert "415" in _documented(api, "/api/v1/resolve", "post")

    settings.API_MAX_BODY_BYTES = 1000
    large = api.post("/api/v1/resolve", {"text": "x" * 2000}, format="json")
    assert large.status_code == 413 and large.json()["code"] == "payload_too_large" and large.json()["fields"]["body"]
    assert "413" in _documented(api, "/api/v1/resolve", "post")


def test_every_agent_write_documents_409_and_every_body_413_and_415(tmp_path):
    target = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    schema = json.loads(target.read_text())
    missing = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", [])) and "409" not in responses:
                missing.append(f"409 {method.upper()} {path}")
            for code in ("413", "415"):
                if "requestBody" in operation and code not in responses:
                    missing.append(f"{code} {method.upper()} {path}")
            if "413" in responses:
                assert responses["413"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert missing == []


def test_a_blank_text_the_api_takes_is_valid_by_the_schema(gov_api):
    """A blank-allowed text field with a pattern that matches "" (no NUL) was ``oneOf`` [pattern, blank]: "" matched
    both, so the schema refused the ``?action=`` and ``"review_notes": ""`` the API takes. A pattern that refuses ""
    (a user id) keeps the blank alternative."""
    schema = gov_api.get("/api/schema/", {"format": "json"}).json()
    components = schema["components"]["schemas"]
    action = next(p for p in schema["paths"]["/api/v1/proposals"]["get"]["parameters"] if p["name"] == "action")
    for field_schema in (action["schema"], components["ReviewRequest"]["properties"]["review_notes"]):
        Draft4Validator(field_schema).validate("")
        assert not Draft4Validator(field_schema).is_valid("a\x00b")
    assert gov_api.get("/api/v1/proposals", {"action": ""}).status_code == 200
    user_id = Draft4Validator(components["Block"]["properties"]["user_id"])
    assert user_id.is_valid("") and user_id.is_valid("alice") and not user_id.is_valid("-alice")
