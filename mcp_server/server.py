"""The MCP server (``mcp`` SDK 2.x, low-level ``Server``): tools, resources, key checks, errors.

Every ``tools/call`` and ``resources/read`` authenticates the key with REST's own code
(``agents.authentication.ApiKeyAuthentication``: same hash lookup, per-process cache, revocation,
failed-attempt throttle per client address, ``last_used_at``), checks the scope with REST's
``ScopePermission`` against the REST view the tool mirrors, validates the arguments with that view's
serializer (after REST's input policy, ``common.parsers.check_value``), and turns any error into REST's
error body through REST's own exception handler (``common.api.exception_handler``) plus the HTTP code:
``{detail, code, fields, http_status, status}``. Each call with a valid key counts against REST's
per-key rate (``ApiKeyRateThrottle``, the same cache buckets, so REST and MCP share one budget).

Errors the model can act on (bad arguments, missing scope, not found, conflict) come back as tool
results with ``isError: true`` and that body as ``structuredContent``; a bad, revoked or missing key
is a JSON-RPC error (code -32010, or -32011 when throttled), as is an unknown tool (checked after the key).

All the ORM work of one call runs in ONE sync function on a bounded thread pool
(``sync_to_async(thread_sensitive=False)``): each worker thread keeps its database connection, and
stale connections are closed before and after each call as Django does around a request.
"""

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.http import QueryDict
from django.http.request import HttpHeaders
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from rest_framework import exceptions
from rest_framework.views import APIView

from actions.selectors import action_count, action_get, action_list
from agents.authentication import ApiKeyAuthentication, ApiKeyRateThrottle, ScopePermission, client_ip, verified_keys_forget
from agents.services import idempotency_key_check, idempotent_request_claim, idempotent_request_store
from autonomy import api as autonomy_api
from autonomy.serializers import ActionSerializer, ConsultPatternSerializer, ConsultRuleSerializer
from common.api import exception_handler
from common.fields import BoundedIntegerField, OffsetField, StrictQuerySerializer
from common.parsers import PayloadTooLarge, RefusedValue, check_value
from embeddings.budget import budget_pending, embedding_budget
from feedback import selectors as feedback_selectors
from learning import api as learning_api
from learning import selectors as learning_selectors
from mcp_server.schemas import serializer_json_schema
from mcp_server.tools import TOOLS, TOOLS_BY_NAME, Caller, Tool
from tenants.context import tenant_request

logger = logging.getLogger(__name__)

SERVER_NAME = "agent-learning-governance"
SERVER_VERSION = "1.0.0"

# JSON-RPC server errors (-32000..-32099) of this application. The SDK itself uses -32000, -32001,
# -32020..-32022 and -32042; MCP uses -32002 for an unknown resource.
UNAUTHENTICATED = -32010
THROTTLED = -32011
FORBIDDEN = -32012
CONFLICT = -32013
RESOURCE_NOT_FOUND = -32002

INSTRUCTIONS = """\
Resolve what an end user types into the verb (action) to run, learn from the user's choices, remember
lessons per user, and act within the autonomy each action has.
* resolve first. 'ambiguous' → show the options, then select_option with the user's pick (the same text
  resolves next time) or abandon_options; confirm_resolution when the user accepted a resolved verb,
  correct_resolution when they meant another one. Always pass the end user's user_id.
* retrieve_memories before answering (put `block` in your context); observe_memory after a useful turn.
* consult_action before acting; when approval is required, propose_action, wait for the review
  (get_proposal), run it, then record_outcome.
* Governance tools (candidates, stats, blocks, imports) need a key with the governance scope.
Resources: alg://verbs (the verb catalogue), alg://actions (actions and autonomy levels), both in pages
(read `next` until it is null), alg://actions/{name} (one action's level and the correction rules in force for you)."""


# --- Authentication and scope: REST's own code ---------------------------------------------------


class KeyRequest:
    """What ``agents.authentication`` reads from a request: the Authorization header and the client address."""

    def __init__(self, authorization: str | None, client: str):
        self.META = {"REMOTE_ADDR": client or "unknown"}
        if authorization:
            self.META["HTTP_AUTHORIZATION"] = authorization
        self.headers = HttpHeaders(self.META)
        self.user = None
        self.auth = None


def _throttled(exc: exceptions.Throttled) -> MCPError:
    return MCPError(THROTTLED, str(exc.detail), data={"code": "throttled", "wait": exc.wait})


def authenticate(authorization: str | None, client: str, *, count: bool = True) -> KeyRequest:
    """The authenticated request (``.user`` the agent, ``.auth`` the key), or an MCPError.

    ``count``: the call counts against the key's request rate (REST's ``ApiKeyRateThrottle``)."""
    request = KeyRequest(authorization, client)
    if client == "stdio":
        # the stdio server is never the process that revokes its one key: it reads the key afresh on every call
        # (one indexed lookup), so a revocation in the admin stops it at once, not within API_KEY_CACHE_S
        verified_keys_forget()
    try:
        found = ApiKeyAuthentication().authenticate(request)
    except exceptions.Throttled as exc:
        raise _throttled(exc) from None
    except exceptions.AuthenticationFailed as exc:
        raise MCPError(UNAUTHENTICATED, str(exc.detail), data={"code": "authentication_failed"}) from None
    if found is None:
        raise MCPError(
            UNAUTHENTICATED, "An API key is required: Authorization: Bearer <key>.", data={"code": "not_authenticated"}
        )
    request.user, request.auth = found
    if count:
        throttle = ApiKeyRateThrottle()
        if not throttle.allow_request(request, None):
            raise _throttled(exceptions.Throttled(throttle.wait()))
    return request


def check_scope(request: KeyRequest, view: type[APIView]) -> None:
    """REST's scope check for ``view``; raises PermissionDenied naming the missing scope."""
    permission = ScopePermission()
    if not permission.has_permission(request, view):
        raise exceptions.PermissionDenied(permission.message)


def check_arguments(arguments: dict[str, Any]) -> None:
    """REST's input policy on a JSON body (``check_value``), each refusal naming its argument."""
    for name, value in arguments.items():
        try:
            check_value({name: value}, settings.API_MAX_JSON_DEPTH)
        except RefusedValue as exc:
            field = "arguments" if exc.field == "body" else exc.field  # a key of the arguments object itself
            raise exceptions.ValidationError({field: [exc.reason]}) from None
        except exceptions.ParseError as exc:  # nested too deep
            raise exceptions.ValidationError({name: [str(exc.detail)]}) from None


def check_size(tool: Tool, arguments: dict[str, Any]) -> None:
    """REST's body limit for the tool's view (``API_MAX_BODY_BYTES``; a view that takes larger bodies says how large)
    on the arguments as JSON: 413 ``payload_too_large`` naming the largest argument, on every transport."""
    view = tool.view()
    limit = view.max_body_bytes() if hasattr(view, "max_body_bytes") else settings.API_MAX_BODY_BYTES
    sizes = {
        name: len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")) for name, value in arguments.items()
    }
    if sum(sizes.values()) > limit:
        largest = max(sizes, key=sizes.get)
        raise PayloadTooLarge(f"The arguments are larger than {limit} bytes ({largest}: {sizes[largest]} bytes).")


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> dict:
    """REST's input policy, then the tool's serializer (the REST view's); unknown argument names are refused too."""
    if not isinstance(arguments, dict):
        raise exceptions.ValidationError({"arguments": ["Expected a JSON object."]})
    check_arguments(arguments)  # first: it bounds the nesting that serialising for the size would recurse into
    check_size(tool, arguments)
    serializer = tool.serializer(data=arguments)
    errors = {} if serializer.is_valid() else dict(serializer.errors)
    known = {name for name, field in serializer.fields.items() if not field.read_only}
    for name in sorted(set(arguments) - known):
        errors.setdefault(name, ["Unknown field."])  # REST's words (its serializer may have said so already)
    if errors:
        raise exceptions.ValidationError(errors)
    return dict(serializer.validated_data)


def plain(data: Any) -> Any:
    """JSON types only (serializer output holds ReturnDicts, UUIDs, datetimes, Decimals)."""
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


@dataclass
class Outcome:
    data: Any = None
    error: dict | None = None  # REST's error body with its HTTP code
    embedding_pending: bool = False  # a row was stored without its vector (REST's X-Embedding-Pending)
    replayed: bool = False  # the stored result of an earlier call with the same idempotency key


def error_body(exc: Exception) -> dict | None:
    """REST's error body, intact, plus ``http_status``; ``status`` is the HTTP code too unless the body has its own."""
    response = exception_handler(exc, {})
    if response is None:
        return None
    return {"status": response.status_code, **response.data, "http_status": response.status_code}


def _in_django(fn: Callable[..., Outcome], *args: Any) -> Outcome:
    """Run like a Django request: stale connections closed before and after; REST's error bodies."""
    close_old_connections()
    try:
        with tenant_request():  # one transaction that sees only the key's tenant, as a REST request
            return fn(*args)
    except MCPError:
        raise
    except Exception as exc:
        body = error_body(exc)
        if body is None:
            logger.exception("MCP call failed")
            raise MCPError(types.INTERNAL_ERROR, "Internal server error; the server log has the details.") from None
        return Outcome(error=body)
    finally:
        close_old_connections()


def tools_permitted_sync(authorization: str | None, client: str) -> Outcome:
    """Names of the tools this key may call (its scopes cover the tool's REST view)."""
    request = authenticate(authorization, client)
    return Outcome(data=[t.name for t in TOOLS if ScopePermission().has_permission(request, t.view)])


IDEMPOTENCY_META = "idempotency_key"


def call_tool_sync(
    name: str, authorization: str | None, client: str, arguments: dict[str, Any], idempotency_key: Any = None
) -> Outcome:
    """One tool call. A tool that writes, called with ``_meta.idempotency_key``, runs once: its result is stored in
    the call's transaction and a retry with the key gets it again (REST's ``Idempotency-Key``, same store)."""
    request = authenticate(authorization, client)  # first: a wrong key is -32010 whatever the tool
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool {name!r}; tools/list names them.")
    check_scope(request, tool.view)
    data = validate_arguments(tool, arguments)
    key = None
    if idempotency_key is not None and not tool.read_only:
        field = f"_meta.{IDEMPOTENCY_META}"
        key = idempotency_key_check(key=idempotency_key, field=field)
        digest = hashlib.sha256(json.dumps(["MCP", name, arguments], sort_keys=True, default=str).encode()).hexdigest()
        stored = idempotent_request_claim(
            agent=request.user,
            key=key,
            method="MCP",
            path=f"tools/{name}",
            request_hash=digest,
            field=field,
            user_id=data.get("user_id") if isinstance(data, Mapping) else None,
        )
        if stored is not None and stored.status_code == 410 and (stored.response or {}).get("code") == "erased":
            # erased with its user's data: the retry is told, as over REST, not answered as if applied
            return Outcome(error={"status": stored.status_code, **stored.response, "http_status": stored.status_code})
        if stored is not None:
            return Outcome(data=stored.response, replayed=True, embedding_pending=stored.embedding_pending)
    with embedding_budget():  # REST's per-request embedding budget: a write never waits on a slow embedder
        result = plain(tool.run(Caller(request.user, request.auth), data))
        pending = budget_pending() > 0
    if key is not None:  # a failed call raised above: the transaction rolls back with its claim
        idempotent_request_store(agent=request.user, key=key, status_code=200, response=result, embedding_pending=pending)
    return Outcome(data=result, embedding_pending=pending)


# --- Resources -------------------------------------------------------------------------------------

VERBS_URI = "alg://verbs"
ACTIONS_URI = "alg://actions"
ACTION_PREFIX = "alg://actions/"
RESOURCE_PAGE_SIZE = 1000  # items of a list resource in one read; ``next`` names the following page


# The REST view whose scopes each resource needs.
RESOURCE_VIEWS: dict[str, type[APIView]] = {
    VERBS_URI: learning_api.ResolveApi,
    ACTIONS_URI: autonomy_api.ActionListApi,
    ACTION_PREFIX + "{name}": autonomy_api.ActionConsultApi,
}


class ResourcePageSerializer(StrictQuerySerializer):
    """A page of a list resource: ``alg://verbs?offset=1000&limit=500``."""

    limit = BoundedIntegerField(
        required=False, default=RESOURCE_PAGE_SIZE, min_value=1, max_value=RESOURCE_PAGE_SIZE, help_text="At most this many"
    )
    offset = OffsetField(default=0, help_text="Skip this many")


def _page(base: str, query: str, key: str, rows: Callable[[int, int], list], total: Callable[[], int]) -> Outcome:
    """One page of a list resource, with the total and the URI of the next page (null after the last)."""
    page = ResourcePageSerializer(data=QueryDict(query))
    page.is_valid(raise_exception=True)
    limit, offset = page.validated_data["limit"], page.validated_data["offset"]
    items, count = rows(limit, offset), total()
    more = offset + len(items) < count and len(items) > 0
    limit_part = f"&limit={limit}" if limit != RESOURCE_PAGE_SIZE else ""
    return Outcome(
        data={key: items, "total": count, "next": f"{base}?offset={offset + len(items)}{limit_part}" if more else None}
    )


def read_resource_sync(uri: str, authorization: str | None, client: str) -> Outcome:
    request = authenticate(authorization, client)
    base, _, query = uri.partition("?")
    if base == VERBS_URI:
        check_scope(request, RESOURCE_VIEWS[VERBS_URI])
        return _page(
            VERBS_URI,
            query,
            "verbs",
            lambda limit, offset: learning_selectors.verb_catalogue(limit=limit, offset=offset),
            learning_selectors.verb_count,
        )
    if base == ACTIONS_URI:
        check_scope(request, RESOURCE_VIEWS[ACTIONS_URI])
        return _page(
            ACTIONS_URI,
            query,
            "actions",
            lambda limit, offset: plain(ActionSerializer(action_list(limit=limit, offset=offset), many=True).data),
            action_count,
        )
    if uri.startswith(ACTION_PREFIX):
        check_scope(request, RESOURCE_VIEWS[ACTION_PREFIX + "{name}"])
        action = action_get(name=uri.removeprefix(ACTION_PREFIX))
        rules = feedback_selectors.active_rules(agent=request.user, action=action)
        patterns = feedback_selectors.active_patterns(agent=request.user, action=action)
        return Outcome(
            data=plain(
                {
                    **ActionSerializer(action).data,
                    "active_rules": ConsultRuleSerializer(rules, many=True).data,
                    "active_patterns": ConsultPatternSerializer(patterns, many=True).data,
                }
            )
        )
    raise MCPError(RESOURCE_NOT_FOUND, f"Unknown resource {uri}.", data={"uri": uri})


def resources_permitted_sync(authorization: str | None, client: str) -> Outcome:
    """URIs and URI templates of the resources this key may read."""
    request = authenticate(authorization, client)
    return Outcome(data=[uri for uri, view in RESOURCE_VIEWS.items() if ScopePermission().has_permission(request, view)])


RESOURCES = [
    types.Resource(
        uri=VERBS_URI,
        name="verbs",
        title="Verb catalogue",
        description=(
            "The active verbs (actions a user's text can resolve to) with display names, descriptions and example"
            " phrases; pages of up to 1,000 with `total` and `next` (the URI of the next page, `?offset=N`)."
        ),
        mime_type="application/json",
    ),
    types.Resource(
        uri=ACTIONS_URI,
        name="actions",
        title="Actions and autonomy levels",
        description=(
            "Every action with its autonomy level: 1 propose only, 2 act then be reviewed, 3 act alone; pages of up"
            " to 1,000 with `total` and `next` (the URI of the next page, `?offset=N`)."
        ),
        mime_type="application/json",
    ),
]
RESOURCE_TEMPLATES = [
    types.ResourceTemplate(
        uri_template=ACTION_PREFIX + "{name}",
        name="action",
        title="One action's autonomy",
        description="An action's current autonomy level and the correction rules and mistake patterns in force for you.",
        mime_type="application/json",
    ),
]

_STATUS_CODES = {400: types.INVALID_PARAMS, 403: FORBIDDEN, 404: RESOURCE_NOT_FOUND, 409: CONFLICT}


# --- The server ------------------------------------------------------------------------------------

KeySource = Callable[[ServerRequestContext], tuple[str | None, str]]  # ctx -> (Authorization header, client address)


def tool_definitions() -> list[types.Tool]:
    return [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=serializer_json_schema(t.serializer),
            annotations=types.ToolAnnotations(
                title=t.title, read_only_hint=t.read_only, destructive_hint=t.destructive, idempotent_hint=t.idempotent
            ),
        )
        for t in TOOLS
    ]


def _error_text(body: dict) -> str:
    fields = body.get("fields") or {}
    if fields:
        reasons = "; ".join(f"{name}: {' '.join(map(str, msgs))}" for name, msgs in fields.items())
        return f"Error ({body.get('code')}, {body.get('http_status')}): {reasons}"
    return f"Error ({body.get('code')}, {body.get('http_status')}): {body.get('detail')}"


def _result_text(tool: Tool, data: Any) -> str:
    if tool.name == "retrieve_memories":
        return data.get("block") or "No memories matched the query."
    return json.dumps(data, ensure_ascii=False)


def _raise_error(outcome: Outcome, **data) -> None:
    """An outcome's error as the JSON-RPC error of its HTTP status (REST's body, and ``data``, as its data)."""
    if outcome.error is not None:
        code = _STATUS_CODES.get(outcome.error["http_status"], types.INTERNAL_ERROR)
        raise MCPError(code, _error_text(outcome.error), data={**data, **outcome.error})


def build_server(key_source: KeySource, *, threads: int | None = None) -> Server:
    """The MCP server; ``key_source(ctx)`` gives each call's Authorization header value and client address."""
    definitions = tool_definitions()
    executor = ThreadPoolExecutor(max_workers=threads or settings.MCP_THREADS, thread_name_prefix="mcp")

    async def in_thread(fn: Callable[..., Outcome], *args: Any) -> Outcome:
        return await sync_to_async(_in_django, thread_sensitive=False, executor=executor)(fn, *args)

    async def list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        """Only the tools the key's scopes allow: an agent is not shown what it may not do."""
        authorization, client = key_source(ctx)
        outcome = await in_thread(tools_permitted_sync, authorization, client)
        _raise_error(outcome)  # a failure to check the key (the database, 503) is an error, not "no tools"
        permitted = set(outcome.data or [])
        return types.ListToolsResult(tools=[d for d in definitions if d.name in permitted])

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        authorization, client = key_source(ctx)
        meta = dict(params.meta or {})
        outcome = await in_thread(
            call_tool_sync, params.name, authorization, client, params.arguments or {}, meta.get(IDEMPOTENCY_META)
        )
        if outcome.error is not None:  # before the tool's lookup: a call whose key could not be checked named none yet
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=_error_text(outcome.error))],
                structured_content=outcome.error,
                is_error=True,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_result_text(TOOLS_BY_NAME[params.name], outcome.data))],
            structured_content=outcome.data,
            meta={
                **({"embedding_pending": True} if outcome.embedding_pending else {}),
                **({"idempotent_replayed": True} if outcome.replayed else {}),
            }
            or None,
        )

    async def permitted_resources(ctx: ServerRequestContext) -> set[str]:
        """As tools/list: only the resources the key's scopes allow."""
        authorization, client = key_source(ctx)
        outcome = await in_thread(resources_permitted_sync, authorization, client)
        _raise_error(outcome)  # as tools/list: a failure to check the key is an error, not "no resources"
        return set(outcome.data or [])

    async def list_resources(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        permitted = await permitted_resources(ctx)
        return types.ListResourcesResult(resources=[r for r in RESOURCES if r.uri in permitted])

    async def list_templates(
        ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        permitted = await permitted_resources(ctx)
        return types.ListResourceTemplatesResult(
            resource_templates=[t for t in RESOURCE_TEMPLATES if t.uri_template in permitted]
        )

    async def read_resource(ctx: ServerRequestContext, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        authorization, client = key_source(ctx)
        outcome = await in_thread(read_resource_sync, uri, authorization, client)
        _raise_error(outcome, uri=uri)
        text = json.dumps(outcome.data, ensure_ascii=False)
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)])

    schemas = {d.name: d.input_schema for d in definitions}
    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        title="Agent Learning Governance",
        instructions=INSTRUCTIONS,
        # the schema an Mcp-Param header is checked against (HTTP, newer protocol): the tool's own, read without the
        # key (the call authenticates once, after); otherwise the SDK would list the key's tools first
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


def fixed_key(raw_key: str) -> KeySource:
    """stdio: one key for the process (AGENT_API_KEY), still checked against the database on every call."""
    authorization = f"Bearer {raw_key}"
    return lambda ctx: (authorization, "stdio")


def http_key(ctx: ServerRequestContext) -> tuple[str | None, str]:
    """Streamable HTTP: ``ctx.request`` is the Starlette request of this POST; the client address is REST's
    (``client_ip``: behind one of ``TRUSTED_PROXIES``, from X-Forwarded-For)."""
    request = ctx.request
    if request is None:
        return None, "unknown"
    meta = {
        "REMOTE_ADDR": request.client.host if request.client else "unknown",
        "HTTP_X_FORWARDED_FOR": ",".join(request.headers.getlist("x-forwarded-for")),
    }
    return request.headers.get("authorization"), client_ip(SimpleNamespace(META=meta))
