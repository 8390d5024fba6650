"""What one JSON-RPC message is, and the errors for what is not, as both MCP transports answer them.

The SDK answers a message it cannot validate with its own validation text (HTTP) or not at all
(stdio); the transports answer these instead: -32700 for what is not JSON, -32600 for a JSON value
that is not one JSON-RPC message (a batch, an object without ``jsonrpc``/``method``), -32602 naming the
member for a ``tools/call`` whose ``name`` or ``arguments`` has the wrong type. The id is the
message's own when it has a usable one (a string or an integer), else null.
"""

from typing import Any

import mcp_types as types
import pydantic_core
from pydantic import ValidationError

RequestId = int | str


def error(code: int, message: str, request_id: RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def parse_error() -> types.JSONRPCError:
    return error(types.PARSE_ERROR, "Parse error")


def not_one_message(subject: str, request_id: RequestId | None = None) -> types.JSONRPCError:
    """-32600: ``subject`` ("A line", "The body") is a JSON value but not one JSON-RPC message object."""
    return error(types.INVALID_REQUEST, f"{subject} must be a single JSON-RPC message object", request_id)


def _request_id(raw: dict) -> RequestId | None:
    value = raw.get("id")
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def _tool_call_problem(params: Any) -> str | None:
    if not isinstance(params, dict):
        return "params must be an object"
    if not isinstance(params.get("name"), str):
        return "params.name must be a string"
    if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
        return "params.arguments must be an object"
    return None


def message_problem(raw: Any, subject: str) -> types.JSONRPCError | None:
    """None when ``raw`` (parsed JSON) is one message the SDK takes as it is, else the error to answer.

    One message is an object with ``"jsonrpc": "2.0"`` and either a string ``method`` (a request, whose
    ``id`` is a string or an integer, or a notification, without ``id``) or an ``id`` with ``result`` or
    ``error`` (a response); ``params``, when given, is an object. Last, the SDK's own validation
    (``mcp_types.jsonrpc_message_adapter``) must pass, so its text never reaches a client.
    """
    if not isinstance(raw, dict):
        return not_one_message(subject)
    request_id = _request_id(raw)
    if raw.get("jsonrpc") != "2.0":
        return not_one_message(subject, request_id)
    if "method" in raw:
        if not isinstance(raw["method"], str) or ("id" in raw and request_id is None):
            return not_one_message(subject, request_id)
        params = raw.get("params")
        if params is not None and not isinstance(params, dict):
            return error(types.INVALID_PARAMS, "params must be an object", request_id)
        if raw["method"] == "tools/call" and "id" in raw and (problem := _tool_call_problem(params)):
            return error(types.INVALID_PARAMS, problem, request_id)
    elif "id" not in raw or not ("result" in raw or "error" in raw):
        return not_one_message(subject, request_id)
    try:
        types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        return not_one_message(subject, request_id)
    return None


def body_problem(body: bytes) -> types.JSONRPCError | None:
    """None when an HTTP body is one JSON-RPC message, else the error to answer (parsed as the SDK parses it)."""
    try:
        raw = pydantic_core.from_json(body)
    except ValueError:
        return parse_error()
    return message_problem(raw, "The body")
