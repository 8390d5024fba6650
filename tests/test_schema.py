"""The OpenAPI schema generates, validates, and has no warnings (warnings are errors)."""

from django.core.management import call_command


def test_schema_generates_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    text = target.read_text()
    assert "/api/v1/resolve" in text
    assert "ApiKey" in text
