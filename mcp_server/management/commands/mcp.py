"""Serve the MCP server.

    AGENT_API_KEY=alg_... python manage.py mcp --transport stdio     # an MCP host starts this
    python manage.py mcp --transport http --host 127.0.0.1 --port 8000  # API + /mcp under uvicorn

stdio: stdout is the JSON-RPC wire, so nothing else may reach it. Logging goes to stderr (settings),
and the key check at startup runs with file descriptor 1 pointed at stderr (the embedded database may
start on that first connection and its tools print). The key is checked at startup, so a host shows
a clear error for a wrong key, and again on every call, so revoking it takes effect at once. A line
that is not JSON is answered -32700 (a JSON value that is not one JSON-RPC message, such as a batch,
-32600), with id null, and the session goes on.
"""

import contextlib
import os
import sys

import anyio
import uvicorn
from django.core.management.base import BaseCommand, CommandError
from mcp import MCPError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from learning.preload import preload
from mcp_server.jsonrpc import message_problem, not_one_message, parse_error
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


def unreadable_answer(exc: Exception) -> SessionMessage:
    """The JSON-RPC error for a line that is no message: -32700 if not JSON, else -32600; id null."""
    not_json = isinstance(exc, ValidationError) and all(e["type"] == "json_invalid" for e in exc.errors())
    return SessionMessage(parse_error() if not_json else not_one_message("A line"))


async def serve_stdio(raw_key: str) -> None:
    server = build_server(fixed_key(raw_key))
    async with stdio_server() as (read_stream, write_stream):
        # The SDK passes a line it cannot read on as an exception and answers nothing; answer it here.
        messages_writer, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def answer_unreadable() -> None:
            async with messages_writer:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await write_stream.send(unreadable_answer(item))
                    elif problem := message_problem(
                        item.message.model_dump(by_alias=True, mode="json", exclude_unset=True), "A line"
                    ):
                        await write_stream.send(SessionMessage(problem))  # a tools/call with a mistyped member, as HTTP
                    else:
                        await messages_writer.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_unreadable)
            await server.run(messages, write_stream, server.create_initialization_options())
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
