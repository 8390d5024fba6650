"""Shared pieces of the REST API: errors and their one answer shape.

Every error answers ``{"detail": str, "code": str, "fields": {field: [reason]}}``;
``fields`` is empty when the error is not about one field.
"""

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, DataError, IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from common.parsers import RefusedValue

logger = logging.getLogger(__name__)


class ApplicationError(Exception):
    """A business rule refused the request; services raise it, the API answers it."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None, extra: dict | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code
        self.extra = extra or {}


class NotFound(ApplicationError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


class Forbidden(ApplicationError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "permission_denied"


class Conflict(ApplicationError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


MAX_ERROR_TEXT = 300  # a field name or reason quoting the input ("'<value>' is not a valid choice") is cut here


def _clip(text) -> str:
    text = str(text)
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


def _flatten(detail, prefix=""):
    """DRF error detail (nested dicts/lists) -> {dotted.field: [reasons]}; names and reasons at most MAX_ERROR_TEXT
    characters (they may quote the input)."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = _clip(f"{prefix}.{key}" if prefix else str(key))
            for k, v in _flatten(value, name).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list):
        if all(not isinstance(d, (dict, list)) for d in detail):
            out.setdefault(prefix or "non_field_errors", []).extend(_clip(d) for d in detail)
        else:
            for i, item in enumerate(detail):
                for k, v in _flatten(item, f"{prefix}[{i}]" if prefix else f"[{i}]").items():
                    out.setdefault(k, []).extend(v)
    else:
        out.setdefault(prefix or "non_field_errors", []).append(_clip(detail))
    return out


# SQLSTATE classes that mean "no usable database": connection exceptions, insufficient resources
# (too many connections, out of disk), operator intervention (shutdown, cannot connect now).
_UNREACHABLE_SQLSTATE_PREFIXES = ("08", "53", "57P")


# SQLSTATEs of a transaction PostgreSQL rolled back because it collided with a concurrent one (deadlock detected,
# serialization failure): nothing of it was stored, and the same request sent again succeeds.
_RETRYABLE_SQLSTATES = ("40P01", "40001")


def database_collision(exc: DatabaseError) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) in _RETRYABLE_SQLSTATES


def database_unreachable(exc: DatabaseError) -> bool:
    """True when the database could not be reached or is shutting down; any other error is the request's or a bug."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_UNREACHABLE_SQLSTATE_PREFIXES)


class RollbackOnError:
    """For a DRF view whose request runs in one transaction (the API's, the console's): a request answered with an
    error keeps nothing it wrote, even what a service committed in a savepoint before it raised."""

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if connection.in_atomic_block:
            transaction.set_rollback(True)
        return response


def error_response(status_code: int, detail: str, code: str, fields: dict | None = None, **extra) -> Response:
    body = {"detail": detail, "code": code, "fields": fields or {}}
    body.update(extra)
    return Response(body, status=status_code)


def database_unavailable_response() -> JsonResponse:
    """503 in the API's error shape, for a request whose database connection failed outside a view (opening or
    closing its transaction), where DRF's exception handler does not reach."""
    body = {"detail": "The database is unavailable; retry the request.", "code": "database_unavailable", "fields": {}}
    return JsonResponse(body, status=503, headers={"Retry-After": "1"})


# What a request Django refuses to read says, by the refusal (fixed texts: an exception's own may name paths).
SUSPICIOUS = {
    "TooManyFieldsSent": "more fields or parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS allows",
    "TooManyFilesSent": "too many files",
    "SuspiciousMultipartForm": "a malformed multipart form",
    "SuspiciousFileOperation": "a file name that is not allowed",
}


def exception_handler(exc, context):
    if isinstance(exc, RefusedValue):
        return error_response(400, str(exc.detail), "invalid", {exc.field: [exc.reason]})
    if isinstance(exc, ApplicationError):
        fields = {exc.field: [exc.message]} if exc.field else {}
        return error_response(exc.status_code, exc.message, exc.code, fields, **exc.extra)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, RequestDataTooBig):
        return error_response(413, "Request body too large.", "payload_too_large")
    elif isinstance(exc, SuspiciousOperation):  # too many fields in a query, a malformed form: the input's fault
        logger.warning("suspicious request answered as 400: %s", exc.__class__.__name__)
        reason = SUSPICIOUS.get(exc.__class__.__name__, "it is malformed")
        return error_response(400, f"The request cannot be read: {reason}.", "invalid")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, IntegrityError):
        logger.warning("integrity error answered as 409: %s", exc.__class__.__name__)
        return error_response(409, "The request conflicts with data that changed meanwhile; retry it.", "conflict")
    elif isinstance(exc, DataError):
        # A value the validation let through but PostgreSQL refuses (out of range, unstorable text): the
        # input's fault, not the database's. Logged: each one is a gap in the serializers to close.
        logger.warning("database refused a value, answered as 400: %s", exc)
        return error_response(400, "A value in the request cannot be stored.", "invalid_value")
    elif isinstance(exc, DatabaseError) and database_collision(exc):
        logger.warning("transaction rolled back by a concurrent one, answered as 503: %s", exc.__cause__.sqlstate)
        response = error_response(503, "The request collided with a concurrent one and was not applied; retry it.", "retry")
        response["Retry-After"] = "1"
        return response
    elif isinstance(exc, DatabaseError) and database_unreachable(exc):
        logger.exception("database unavailable")
        response = error_response(503, "The database is unavailable; retry the request.", "database_unavailable")
        response["Retry-After"] = "1"
        return response

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        first = next(iter(fields.items()), ("", ["Invalid input."]))
        message = f"{first[0]}: {first[1][0]}" if first[0] != "non_field_errors" else first[1][0]
        response.data = {"detail": message, "code": "invalid", "fields": fields}
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, exceptions.ParseError) or code == "payload_too_large":
            code = "parse_error" if isinstance(exc, exceptions.ParseError) else code
            response.data = {"detail": str(detail), "code": code, "fields": {"body": [str(detail)]}}
        else:
            response.data = {"detail": str(detail), "code": code, "fields": {}}
    return response
