"""The OpenAPI schema generates, validates, and has no warnings (warnings are errors)."""

import json
import re

from django.core.management import call_command


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
