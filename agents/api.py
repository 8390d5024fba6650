"""The base of every API view: one transaction per request that sees only the caller's tenant, and writes that a
retry with the same ``Idempotency-Key`` does not apply twice."""

import hashlib
import json
import logging
from collections.abc import Mapping
from types import SimpleNamespace

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import SAFE_METHODS
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Agent
from agents.services import (
    idempotency_key_check,
    idempotent_request_claim,
    idempotent_request_release,
    idempotent_request_store,
)
from common.api import ApplicationError, RollbackOnError, database_unavailable_response, database_unreachable
from common.parsers import PayloadTooLarge
from tenants.context import tenant_request

logger = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"


class _Replay(Exception):
    """The request was answered before under its idempotency key: the stored answer is the answer."""

    def __init__(self, response: Response):
        self.response = response


def _request_hash(request) -> str:
    """sha256 of what makes two requests the same: method, path, query and body (an uploaded file by its content)."""
    data = request.data
    if hasattr(data, "lists"):  # a QueryDict (form or multipart)
        data = {k: v for k, v in data.lists()}

    def _file(obj):
        if hasattr(obj, "chunks"):
            digest = hashlib.sha256()
            for chunk in obj.chunks():
                digest.update(chunk)
            obj.seek(0)
            return {"file": obj.name, "sha256": digest.hexdigest()}
        return str(obj)

    body = json.dumps([request.method, request.path, sorted(request.query_params.lists()), data], sort_keys=True, default=_file)
    return hashlib.sha256(body.encode()).hexdigest()


def _body_size_check(view, request) -> None:
    """A 413 for a body declared larger than the view takes (the limit of ``common.parsers.LimitedJSONParser``),
    before hashing reads it: a multipart upload would be read whole (to disk) only to be refused."""
    limit = view.max_body_bytes() if hasattr(view, "max_body_bytes") else settings.API_MAX_BODY_BYTES
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")


def _key(request) -> str | None:
    """The request's idempotency key, or None; a 400 for a malformed one or a caller that cannot use one."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None or request.method in SAFE_METHODS:
        return None
    idempotency_key_check(key=key, field=IDEMPOTENCY_HEADER)
    if not isinstance(request.user, Agent):
        raise ApplicationError(
            f"{IDEMPOTENCY_HEADER} is for agents' API keys; a reviewer's repeated decision is refused as already made.",
            field=IDEMPOTENCY_HEADER,
        )
    return key


class NoFormatOverride(DefaultContentNegotiation):
    """Content negotiation by ``Accept`` alone: the API answers JSON, and ``?format=`` switches nothing."""

    settings = SimpleNamespace(URL_FORMAT_OVERRIDE=None)


class TenantApiView(RollbackOnError, APIView):
    """Each request runs in one transaction; authentication names the caller's tenant for it (``SET LOCAL``),
    so every query, including one the code forgets to filter, sees only that tenant's rows.

    A write (any method but GET, HEAD, OPTIONS) an agent sends with an ``Idempotency-Key`` header is applied once:
    its successful answer is stored in the same transaction as the write, and the same request sent again with the
    key gets that answer (header ``Idempotent-Replayed: true``) without running again. A failed request stores
    nothing, so its retry runs. The key on another request is a 409."""

    idempotent_writes = True  # the OpenAPI schema documents the header (common.schema)
    _idempotency_key: str | None = None
    # The query parameters a write takes (its input is its body): any other is refused, not ignored while the write
    # is applied ("?dry_run=true" would store what it was meant to preview).
    write_query_params: frozenset[str] = frozenset()
    # ``?format=`` is a query parameter like any other (refused where unknown), not DRF's renderer switch (a 404)
    content_negotiation_class = NoFormatOverride

    def dispatch(self, request, *args, **kwargs):
        try:
            with tenant_request():
                return super().dispatch(request, *args, **kwargs)
        except DatabaseError as exc:  # the connection failed opening or closing the transaction, past DRF's handler
            if not database_unreachable(exc):
                raise
            logger.warning("database unavailable around the request, answered as 503: %s", exc.__class__.__name__)
            return database_unavailable_response()

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles
        if not hasattr(self, request.method.lower()) or request.method.lower() not in self.http_method_names:
            return  # the method is not allowed: 405, nothing to claim
        if request.method not in SAFE_METHODS:
            unknown = sorted(set(request.query_params) - self.write_query_params)
            if unknown:
                takes = ", ".join(sorted(self.write_query_params)) or "none"
                raise ApplicationError(
                    f"Unknown query parameter {unknown[0][:100]!r}: a write takes its input in the body (query "
                    f"parameters it takes: {takes}).",
                    field=unknown[0][:100],
                )
        key = _key(request)
        if key is None:
            return
        _body_size_check(self, request)
        stored = idempotent_request_claim(
            agent=request.user,
            key=key,
            method=request.method,
            path=request.path,
            request_hash=_request_hash(request),
            user_id=request.data.get("user_id") if isinstance(request.data, Mapping) else None,
        )
        if stored is not None:
            replay = Response(stored.response, status=stored.status_code, headers={"Idempotent-Replayed": "true"})
            replay.embedding_pending = stored.embedding_pending  # the embedding budget's middleware says it again
            raise _Replay(replay)
        self._idempotency_key = key

    def handle_exception(self, exc):
        if isinstance(exc, _Replay):
            return exc.response
        return super().handle_exception(exc)  # RollbackOnError: the idempotency claim goes with the rest

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        key, self._idempotency_key = self._idempotency_key, None
        if key is None or _aborted():
            return response  # no claim, or the transaction rolls back and the claim with it
        if 200 <= response.status_code < 300:
            body = json.loads(JSONRenderer().render(response.data)) if response.data is not None else None
            pending = getattr(request._request, "embedding_pending", None)  # set by the embedding budget's middleware
            idempotent_request_store(
                agent=request.user,
                key=key,
                status_code=response.status_code,
                response=body,
                embedding_pending=bool(pending and pending()),
            )
        else:
            idempotent_request_release(agent=request.user, key=key)
        return response


def _aborted() -> bool:
    """True when PostgreSQL refuses further statements in the request's transaction (it will be rolled back)."""
    raw = connection.connection
    if connection.needs_rollback or raw is None:
        return True
    try:  # a lost connection (UNKNOWN) cannot commit either
        return raw.closed or raw.info.transaction_status in (
            psycopg.pq.TransactionStatus.INERROR,
            psycopg.pq.TransactionStatus.UNKNOWN,
        )
    except DatabaseError:
        return True
