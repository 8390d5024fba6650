"""Serve the MCP server.

    AGENT_API_KEY=alg_... python manage.py mcp --transport stdio     # an MCP host starts this
    python manage.py mcp --transport http --host 127.0.0.1 --port 8000  # API + /mcp under uvicorn

stdio: stdout is the JSON-RPC wire, so nothing else may reach it. Logging goes to stderr (settings),
and the key check at startup runs with file descriptor 1 pointed at stderr (the embedded database may
start on that first connection and its tools print). The key is checked at startup, so a host shows
a clear error for a wrong key, and again on every call, so revoking it takes effect at once. A line
that is not JSON or not utf-8 is answered -32700 (a JSON value that is not one JSON-RPC message, such as a
batch, -32600), with id null, and the session goes on. Lines are read here, as bytes, not by the SDK's
stdio transport (which decodes them with replacement characters and would store the replaced text); its
transport still owns stdout.
"""

import contextlib
import io
import os
import sys
from collections import Counter

import anyio
import uvicorn
from django.core.management.base import BaseCommand, CommandError
from mcp import MCPError, types
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

from learning.preload import preload
from mcp_server.jsonrpc import error, message_read
from mcp_server.server import authenticate, build_server, fixed_key
from tenants.context import tenant_request


@contextlib.contextmanager
def stdout_to_stderr():
    """Point file descriptor 1 at stderr for the block (child processes included), then restore it."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def stdin_claimed():
    """The process's stdin as a private binary file; file descriptor 0 reads the null device meanwhile (so a
    child process never eats the wire), and is restored after."""
    private = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield os.fdopen(private, "rb", buffering=0, closefd=False)
    finally:
        os.dup2(private, 0)
        os.close(private)


class LinesEnd:
    """What the SDK's stdio transport reads in place of stdin: nothing, until ``end`` (stdin read to its end)."""

    def __init__(self):
        self.ended = anyio.Event()

    def __aiter__(self):
        return self

    async def __anext__(self):
        await self.ended.wait()
        raise StopAsyncIteration

    def end(self) -> None:
        self.ended.set()


# What the SDK answers a request sent before initialize (its pinned, generic shape).
UNINITIALIZED = types.ErrorData(code=types.INVALID_PARAMS, message="Invalid request parameters", data="")
# At the end of stdin, how long the requests still running may take to be answered before the server stops.
DRAIN_S = 300


PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"


def _key(request_id):
    """A request id as the SDK matches ids ("7" and 7 are one id)."""
    try:
        return coerce_request_id(request_id)
    except (TypeError, ValueError):
        return str(request_id)


class Answers:
    """The stdio write stream, counting the requests read and not answered yet: at the end of stdin the server stops
    only once they are answered (stopping it cancels them: a write that commits would be answered "Connection
    closed", and a retry would apply it twice)."""

    def __init__(self, stream):
        self.stream = stream
        self.open: Counter = Counter()
        self.idle = anyio.Event()
        self.idle.set()

    initialized = False  # an initialize request was read, or a request of the protocol that has none (its _meta says)

    def asked(self, message) -> None:
        if isinstance(message, types.JSONRPCRequest):
            meta = (message.params or {}).get("_meta")
            self.initialized = (
                self.initialized or message.method == "initialize" or (isinstance(meta, dict) and PROTOCOL_META in meta)
            )
            self.open[_key(message.id)] += 1
            self.idle = anyio.Event() if self.idle.is_set() else self.idle
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self._settled((message.params or {}).get("requestId"))  # a cancelled request may go unanswered

    def _settled(self, request_id) -> None:
        key = _key(request_id)
        if self.open[key] > 0:
            self.open[key] -= 1
        if not +self.open:
            self.idle.set()

    async def send(self, item) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCError) and not self.initialized and message.error == UNINITIALIZED:
            # the SDK's answer to a request before the session is initialized names nothing: say why
            item = SessionMessage(error(types.INVALID_PARAMS, "Send initialize before any other request.", message.id))
        await self.stream.send(item)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
            self._settled(message.id)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self):
        await self.stream.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self.stream.__aexit__(*exc)


async def serve_stdio(raw_key: str) -> None:
    server = build_server(fixed_key(raw_key))
    lines_end = LinesEnd()
    with stdin_claimed() as stdin:
        async with stdio_server(stdin=lines_end) as (_unused, stdout_stream):
            write_stream = Answers(stdout_stream)
            messages_writer, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)

            async def read_lines() -> None:
                """Each line as bytes: one message for the server, or the error to answer in its place. At the end,
                the requests still running are answered first."""
                async with messages_writer:
                    async for line in anyio.wrap_file(io.BufferedReader(stdin)):
                        if not line.strip():
                            continue
                        message, problem = message_read(line, "A line")
                        if problem is not None:
                            await write_stream.send(SessionMessage(problem))
                        else:
                            write_stream.asked(message)
                            await messages_writer.send(SessionMessage(message))
                    with anyio.move_on_after(DRAIN_S):
                        await write_stream.idle.wait()
                lines_end.end()

            async with anyio.create_task_group() as tg:
                tg.start_soon(read_lines)
                await server.run(messages, write_stream, server.create_initialization_options())
                lines_end.end()
                tg.cancel_scope.cancel()  # the server is done: stop reading


class Command(BaseCommand):
    help = "Serve the MCP server: over stdio with the key in AGENT_API_KEY, or over streamable HTTP with the API."
    requires_system_checks = []  # nothing may be printed before the stdio wire opens

    def add_arguments(self, parser):
        parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
        parser.add_argument("--host", default="127.0.0.1", help="http: the address to listen on")
        parser.add_argument("--port", type=int, default=8000, help="http: the port to listen on (1-65535)")

    def handle(self, *args, transport, host, port, **options):
        if transport == "http":
            if not 1 <= port <= 65535:
                raise CommandError(f"--port must be between 1 and 65535 (got {port}).")
            uvicorn.run("config.asgi:application", host=host, port=port, lifespan="on", log_level="warning")
            return
        raw_key = os.environ.get("AGENT_API_KEY", "").strip()
        if not raw_key:
            raise CommandError("Set AGENT_API_KEY to the agent's API key (manage.py create_agent_key makes one).")
        with stdout_to_stderr():
            try:
                with tenant_request():  # checked once at start, as each call will be
                    authenticate(f"Bearer {raw_key}", "stdio", count=False)
            except MCPError as exc:
                raise CommandError(f"AGENT_API_KEY was refused: {exc.message}") from None
        preload()  # what ranking needs, loaded before the first call
        anyio.run(serve_stdio, raw_key)
