"""Streamable HTTP: the MCP server at ``MCP_HTTP_PATH`` (/mcp) next to Django, on the same host and port.

``config.asgi.application`` is ``with_mcp(<Django's ASGI app>)``; serve it with an ASGI server that runs
the lifespan protocol::

    uvicorn config.asgi:application --host 127.0.0.1 --port 8000 --lifespan on
    gunicorn config.asgi:application -k uvicorn.workers.UvicornWorker -b 127.0.0.1:8000

The router answers the lifespan itself (Django's ASGI handler refuses lifespan scopes) and keeps the
SDK's session manager running between startup and shutdown. The manager is stateless with JSON
answers: every POST stands alone (no ``Mcp-Session-Id``), so any worker can answer any request.

Before a request reaches the SDK: the Host (and any Origin) must pass Django's ``ALLOWED_HOSTS``, as
every Django request must (the DNS-rebinding guard), any method but POST is answered 405 (stateless
JSON answers: no GET event stream, no session to DELETE), a request without ``Authorization: Bearer``
is answered 401 with ``WWW-Authenticate: Bearer``, and a body that is not ``application/json`` 415 with a
JSON-RPC error (the SDK's own check would answer it in plain text). Then the body is read (up to
``MCP_MAX_BODY_BYTES``; a larger one goes on to the SDK, which answers 413) and must be one JSON-RPC
message (``mcp_server.jsonrpc``), else 400 with a JSON-RPC error as stdio answers a line: -32700 for
what is not JSON, -32600 for a batch or an object that is no message, -32602 naming the member for a
``tools/call`` whose ``name`` or ``arguments`` has the wrong type (the SDK would answer its own
validation text, or "Invalid request parameters"). The key itself is checked per call, by REST's code.
"""

import contextlib
import json
import logging
from collections import deque
from urllib.parse import urlsplit

import mcp_types as types
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from mcp_server.jsonrpc import body_problem
from mcp_server.server import build_server, http_key

logger = logging.getLogger(__name__)


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # Django's own rule for DEBUG without ALLOWED_HOSTS
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _host_allowed(host: str) -> bool:
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


async def _answer(send, status: int, detail: str, code: str, extra_headers: list | None = None) -> None:
    body = json.dumps({"detail": detail, "code": code, "fields": {}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})


async def _rpc_error(send, status: int, message: str | types.JSONRPCError) -> None:
    """A JSON-RPC error: ``message`` about the request as a whole (-32600, ``id`` null), or the error given."""
    if isinstance(message, str):
        message = types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=types.INVALID_REQUEST, message=message))
    body = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _media_ranges(value: str) -> list[tuple[str, float]]:
    """The media types of a Content-Type or Accept value, lower-cased, with their q (1 when not given)."""
    ranges = []
    for part in value.split(","):
        media, *params = part.split(";")
        q = 1.0
        for param in params:
            name, _, number = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(number.strip())
                except ValueError:
                    q = 0.0
        if media.strip():
            ranges.append((media.strip().lower(), q))
    return ranges


def _accepts_json(accept: str | None) -> bool:
    """Whether an Accept header admits a JSON answer (none, or an empty one: anything does)."""
    if accept is None or not accept.strip():
        return True
    return any(media in ("application/json", "application/*", "*/*") and q > 0 for media, q in _media_ranges(accept))


def _headers_normalised(scope) -> dict:
    """``scope`` as the SDK compares its headers: the Content-Type's media type in lower case (media types are
    case-insensitive; the SDK compares them as sent), and an Accept that admits JSON saying so plainly (none, or
    ``*/*``, is anything to us, a 406 to the SDK)."""
    headers = []
    for name, value in scope.get("headers", []):
        key = name.lower()
        if key == b"content-type":
            media, sep, params = value.partition(b";")
            value = media.strip().lower() + sep + params
        elif key == b"accept":
            continue
        headers.append((name, value))
    headers.append((b"accept", b"application/json"))  # _accepts_json let it through: JSON is what it gets
    return {**scope, "headers": headers}


async def _read_body(scope, receive, limit: int):
    """``(body, receive, too_large)``: the request body and a ``receive`` that gives it to the SDK again.

    The body is None when it is larger than ``limit`` (declared or sent: ``too_large``) or the client left
    before sending it all; what was read is then replayed as it came.
    """
    declared = dict(scope.get("headers", [])).get(b"content-length", b"")
    messages = deque()
    body = None
    too_large = declared.isdigit() and int(declared) > limit
    if not too_large:
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                too_large = True
                break
            if not message.get("more_body", False):
                body = b"".join(m.get("body", b"") for m in messages)
                messages = deque([{"type": "http.request", "body": body, "more_body": False}])
                break

    async def replay():
        return messages.popleft() if messages else await receive()

    return body, replay, too_large


class McpRouter:
    """ASGI app: lifespan and ``MCP_HTTP_PATH`` here, everything else to Django."""

    def __init__(self, django_app, *, path: str | None = None):
        self.django_app = django_app
        self.path = (path or settings.MCP_HTTP_PATH).rstrip("/")
        self.server = build_server(http_key)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            security_settings=None,  # the Host/Origin check below is Django's (ALLOWED_HOSTS)
            max_request_body_size=settings.MCP_MAX_BODY_BYTES,
        )
        self.mcp_app = StreamableHTTPASGIApp(self.manager)
        self.running = False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"].rstrip("/") == self.path:
            await self._mcp(scope, receive, send)
        else:
            await self.django_app(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        stack = contextlib.AsyncExitStack()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await stack.enter_async_context(self.manager.run())
                except Exception as exc:
                    logger.exception("the MCP session manager did not start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                self.running = True
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.running = False
                await stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _mcp(self, scope, receive, send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not _host_allowed(headers.get("host", "")):
            await _answer(send, 400, "Invalid Host header: add it to ALLOWED_HOSTS.", "bad_host")
            return
        origin = headers.get("origin")
        if origin and not _host_allowed(urlsplit(origin).netloc):
            await _answer(send, 403, "Origin not allowed.", "bad_origin")
            return
        if scope.get("method") != "POST":
            await _answer(
                send, 405, "Only POST: the endpoint is stateless with JSON answers.", "method_not_allowed", [(b"allow", b"POST")]
            )
            return
        if not headers.get("authorization", "").lower().startswith("bearer "):
            await _answer(
                send,
                401,
                "An API key is required: Authorization: Bearer <key>.",
                "not_authenticated",
                [(b"www-authenticate", b"Bearer")],
            )
            return
        if not headers.get("content-type", "").lower().startswith("application/json"):
            # The SDK's own check answers this in plain text, not JSON-RPC: answer as the SDK means to.
            await _rpc_error(send, 415, "Unsupported Media Type: Content-Type must be application/json")
            return
        if not _accepts_json(headers.get("accept")):  # the SDK's answer to this has no body on one protocol version
            await _rpc_error(send, 406, "Not Acceptable: Accept must include application/json")
            return
        scope = _headers_normalised(scope)
        if not self.running:
            await _answer(
                send, 503, "The MCP endpoint needs the ASGI lifespan: run the server with --lifespan on.", "mcp_not_started"
            )
            return
        limit = self.manager.max_request_body_size
        body, receive, too_large = await _read_body(scope, receive, limit)
        if too_large:  # the SDK answers this in plain text: a JSON-RPC error instead, as for the other refusals
            await _rpc_error(send, 413, f"Payload Too Large: the body is larger than {limit} bytes")
            return
        if body is None:  # the client left before sending all of it: no one to answer
            return
        if problem := body_problem(body):
            await _rpc_error(send, 400, problem)
            return
        await self.mcp_app(scope, receive, send)


def with_mcp(django_app):
    """Django's ASGI app with the MCP endpoint, or Django's app alone when MCP_HTTP_ENABLED is off."""
    return McpRouter(django_app) if settings.MCP_HTTP_ENABLED else django_app
