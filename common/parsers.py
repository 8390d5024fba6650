"""Request parsers with limits: body size and JSON nesting depth, each a setting.

DRF's JSON parser reads the request stream directly, so Django's
DATA_UPLOAD_MAX_MEMORY_SIZE does not protect it; this one does.
"""

import json

from django.conf import settings
from rest_framework import exceptions, parsers


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def _depth(value, limit: int) -> int:
    """Nesting depth of a parsed JSON value, iteratively (no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest


class LimitedJSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        if length and length.isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding), parse_constant=_refuse_constant)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
        if _depth(data, settings.API_MAX_JSON_DEPTH) > settings.API_MAX_JSON_DEPTH:
            raise exceptions.ParseError(f"JSON nested deeper than {settings.API_MAX_JSON_DEPTH} levels.")
        return data


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
