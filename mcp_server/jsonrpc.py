"""What one JSON-RPC message is, and the errors for what is not, as both MCP transports answer them.

The SDK answers a message it cannot validate with its own validation text (HTTP), a generic -32602
that names nothing, or not at all (stdio); the transports answer these instead: -32700 for what is not
JSON (or not utf-8), -32600 for a JSON value that is not one JSON-RPC message (a batch, an object
without ``jsonrpc``/``method``), -32602 naming the member for a request whose params do not fit its
method (``tools/call`` with a mistyped ``name``, ``arguments`` or ``_meta``, ``resources/read`` without
``uri``, a ``cursor`` that is no string, ...) or hold what the SDK's parser cannot read (a lone utf-16
surrogate escape, nesting deeper than the input policy allows). The id is the message's own when it has
a usable one (a string or an integer), else null.
"""

import json
from typing import Any

import mcp_types as types
import pydantic_core
from django.conf import settings
from mcp_types.methods import MONOLITH_REQUESTS, SPEC_CLIENT_METHODS
from pydantic import ValidationError

from common.parsers import RefusedValue, TooDeep, check_value, object_without_twins, text_problem

RequestId = int | str


def error(code: int, message: str, request_id: RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def parse_error() -> types.JSONRPCError:
    return error(types.PARSE_ERROR, "Parse error")


def not_one_message(subject: str, request_id: RequestId | None = None) -> types.JSONRPCError:
    """-32600: ``subject`` ("A line", "The body") is a JSON value but not one JSON-RPC message object."""
    return error(types.INVALID_REQUEST, f"{subject} must be a single JSON-RPC message object", request_id)


def _request_id(raw: dict) -> RequestId | None:
    """The message's id when an answer can carry it: an integer, or a string that can be written back (not one
    holding a lone surrogate or a NUL, which Python's parser keeps and no JSON writer here accepts)."""
    value = raw.get("id")
    if isinstance(value, str):
        return value if text_problem(value) is None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tool_call_problem(params: Any) -> str | None:
    if not isinstance(params, dict):
        return "params must be an object"
    if not isinstance(params.get("name"), str):
        return "params.name must be a string"
    if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
        return "params.arguments must be an object"
    return None


def _params_problem(method: str, params: Any) -> str | None:
    """The first member of a spec method's params that does not fit the method (the SDK's own model), as
    ``params.<member>: <reason>``; None when they fit or the method is not one the SDK validates."""
    if method not in SPEC_CLIENT_METHODS or method not in MONOLITH_REQUESTS:
        return None
    try:
        MONOLITH_REQUESTS[method].model_validate({"method": method, "params": params or {}}, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where or 'params'}: {first['msg']}"
    return None


def _checked(raw: Any, subject: str) -> tuple[types.JSONRPCMessage | None, types.JSONRPCError | None]:
    if not isinstance(raw, dict):
        return None, not_one_message(subject)
    request_id = _request_id(raw)
    if raw.get("jsonrpc") != "2.0":
        return None, not_one_message(subject, request_id)
    if "method" in raw:
        if not isinstance(raw["method"], str) or ("id" in raw and request_id is None):
            return None, not_one_message(subject, request_id)
        params = raw.get("params")
        if params is not None and not isinstance(params, dict):
            return None, error(types.INVALID_PARAMS, "params must be an object", request_id)
        if "id" in raw:
            problem = (_tool_call_problem(params) if raw["method"] == "tools/call" else None) or _params_problem(
                raw["method"], params
            )
            if problem:
                return None, error(types.INVALID_PARAMS, problem, request_id)
    elif "id" not in raw or not ("result" in raw or "error" in raw):
        return None, not_one_message(subject, request_id)
    try:
        return types.jsonrpc_message_adapter.validate_python(raw, by_name=False), None
    except ValidationError:
        return None, not_one_message(subject, request_id)


def message_problem(raw: Any, subject: str) -> types.JSONRPCError | None:
    """None when ``raw`` (parsed JSON) is one message the SDK takes as it is, else the error to answer.

    One message is an object with ``"jsonrpc": "2.0"`` and either a string ``method`` (a request, whose
    ``id`` is a string or an integer, or a notification, without ``id``) or an ``id`` with ``result`` or
    ``error`` (a response); ``params``, when given, is an object and, for a request of a method the SDK
    knows, fits that method. Last, the SDK's own validation (``mcp_types.jsonrpc_message_adapter``) must
    pass, so its text never reaches a client.
    """
    return _checked(raw, subject)[1]


def _unparsable(data: bytes | str, subject: str) -> types.JSONRPCError:
    """The error for ``data`` the SDK's JSON parser refuses: -32700 when it is not JSON at all; when it is (a
    lone surrogate escape, nesting deeper than that parser reads), the message's own id and the member, as the
    input policy names it (REST's, on the arguments and the rest of the params alike)."""
    try:
        raw = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)  # strictly utf-8, no BOM
    except (ValueError, RecursionError):  # not utf-8, not JSON, or nested deeper than Python's parser reads
        return parse_error()
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0" or not isinstance(raw.get("method"), str):
        return not_one_message(subject, _request_id(raw) if isinstance(raw, dict) else None)
    request_id = _request_id(raw)
    try:  # the arguments object is level 1 of the input policy, as REST's body is: params is level 0
        check_value(raw.get("params"), settings.API_MAX_JSON_DEPTH + 1)
    except RefusedValue as exc:
        member = "params" if exc.field == "body" else f"params.{exc.field}"
        return error(types.INVALID_PARAMS, f"{member}: {exc.reason}", request_id)
    except TooDeep as exc:  # named by the member it is in (the argument, for a tool call), not the whole long path
        parts = exc.field.split(".")[:2] if exc.field != "body" else []
        member = ".".join(["params", *parts[:-1], *(parts[-1:] and [parts[-1].split("[")[0]])])
        limit = settings.API_MAX_JSON_DEPTH
        return error(
            types.INVALID_PARAMS, f"{member}: JSON nested deeper than {limit} levels (arguments are level 1).", request_id
        )
    return not_one_message(subject, request_id)


def message_read(data: bytes | str, subject: str) -> tuple[types.JSONRPCMessage | None, types.JSONRPCError | None]:
    """One JSON-RPC message from ``data`` (parsed as the SDK parses it), or the error to answer instead."""
    try:
        raw = pydantic_core.from_json(data)
    except ValueError:
        return None, _unparsable(data, subject)
    twin = _key_twice(data)
    if twin is not None:  # as REST refuses it: which of the two values was meant is not known
        return None, error(types.INVALID_PARAMS, twin, _request_id(raw) if isinstance(raw, dict) else None)
    return _checked(raw, subject)


def _key_twice(data: bytes | str) -> str | None:
    """Why ``data`` (JSON the SDK's parser read, keeping the last of two values of one key) is refused, or None."""
    try:
        json.loads(data.decode("utf-8") if isinstance(data, bytes) else data, object_pairs_hook=object_without_twins)
    except ValueError as exc:
        return str(exc) if "appears twice" in str(exc) else None
    except RecursionError:  # nested deeper than Python's parser reads: the input policy answers that
        return None
    return None


def body_problem(body: bytes) -> types.JSONRPCError | None:
    """None when an HTTP body is one JSON-RPC message, else the error to answer."""
    return message_read(body, "The body")[1]
