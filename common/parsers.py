"""Request parsers with limits: body size and JSON nesting depth, each a setting, and the values JSON
may carry but the database cannot store.

DRF's JSON parser reads the request stream directly, so Django's
DATA_UPLOAD_MAX_MEMORY_SIZE does not protect it; this one does. Every JSON body of every app goes
through ``LimitedJSONParser`` (the default parser); ``check_value`` is the one input policy:

* no NUL byte and no lone surrogate (``"\\ud800"``) in any string or key: PostgreSQL cannot store them;
* numbers: finite, integers within 64 bits (``1e400`` and ``NaN`` are refused);
* nesting at most ``API_MAX_JSON_DEPTH`` levels (checked without recursion).
"""

import json
import math
import re

from django.conf import settings
from rest_framework import exceptions, parsers


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "Request body too large."
    default_code = "payload_too_large"


class RefusedValue(exceptions.ParseError):
    """Well-formed JSON holding a value the input policy refuses; answered 400 ``invalid`` naming the field."""

    default_code = "invalid"

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class TooDeep(exceptions.ParseError):
    """JSON nested deeper than the input policy allows; ``field``: the path to the value past the limit."""

    def __init__(self, field: str, limit: int):
        super().__init__(f"JSON nested deeper than {limit} levels.")
        self.field = field


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# NUL, and UTF-16 surrogates that are not part of a pair (json.loads leaves "\\ud800" as a lone surrogate).
UNSTORABLE_RE = re.compile("[\x00\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why a string cannot be accepted, or None."""
    match = UNSTORABLE_RE.search(value)
    if match is None:
        return None
    return "contains a NUL character" if match.group() == "\x00" else "contains a lone UTF-16 surrogate"


def check_value(value, limit: int) -> None:
    """Raise TooDeep or RefusedValue naming the first value the input policy refuses (iteratively)."""
    stack = [(value, 1, "")]
    while stack:
        node, level, path = stack.pop()
        field = path or "body"
        if isinstance(node, (dict, list)):
            if level > limit:
                raise TooDeep(field, limit)
            if isinstance(node, dict):
                for key, child in node.items():
                    problem = text_problem(key)
                    if problem:
                        raise RefusedValue(field, f"A key {problem}.")
                    stack.append((child, level + 1, f"{path}.{key}" if path else key))
            else:
                stack.extend((child, level + 1, f"{path}[{i}]") for i, child in enumerate(node))
        elif isinstance(node, str):
            problem = text_problem(node)
            if problem:
                raise RefusedValue(field, f"The value {problem}.")
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not INT64_MIN <= node <= INT64_MAX:
                raise RefusedValue(field, "An integer outside 64 bits.")
        elif isinstance(node, float) and not math.isfinite(node):
            raise RefusedValue(field, "Not a finite number.")


class LimitedJSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        view = (parser_context or {}).get("view")
        # A view that takes larger bodies (bulk import) says how large; every other view: API_MAX_BODY_BYTES.
        limit = view.max_body_bytes() if hasattr(view, "max_body_bytes") else settings.API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        if length and length.isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except LookupError as exc:  # a charset that names no text encoding (base64, zlib): Django lets it through
            raise exceptions.ParseError(f"Unsupported charset {encoding!r}: {exc}") from exc
        except UnicodeError as exc:  # bytes the charset cannot decode, or a codec that decodes nothing (undefined)
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
        return json_loads_checked(text)


def json_loads_checked(text: str):
    """``text`` parsed as JSON under the input policy (``check_value``, with ``API_MAX_JSON_DEPTH``): ParseError for
    text that is not JSON (NaN and Infinity included, and nesting too deep to parse), TooDeep or RefusedValue for a
    value the policy refuses. The API's parser and the admin's JSON fields share it."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=object_without_twins)
    except (ValueError, RecursionError) as exc:
        raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
    check_value(data, settings.API_MAX_JSON_DEPTH)
    return data


def object_without_twins(pairs: list) -> dict:
    """A JSON object whose keys are all different: a key given twice is ambiguous (which value was meant?), not the
    last one silently."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set = set()
        twin = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {twin[:100]!r} appears twice in one object")
    return data


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class _CheckedFormMixin:
    """A form or multipart body under the input policy: a charset that cannot decode it is a 400 (Django's parsers
    raise LookupError or UnicodeError), and a field name or value with a NUL or a lone surrogate is refused naming
    the field (``form`` when the name itself is refused), as JSON bodies are."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            parsed = super().parse(stream, media_type, parser_context)
        except (LookupError, UnicodeError) as exc:  # DjangoUnicodeDecodeError is a UnicodeError
            raise exceptions.ParseError(f"The body cannot be read in its charset: {exc.__class__.__name__}.") from exc
        fields = getattr(parsed, "data", parsed)
        files = getattr(parsed, "files", None)
        for key, values in [*fields.lists(), *(files.lists() if files is not None else [])]:
            problem = text_problem(key)
            if problem:
                raise RefusedValue("form", f"A field name {problem}.")
            for value in values:
                problem = text_problem(value if isinstance(value, str) else getattr(value, "name", "") or "")
                if problem:
                    raise RefusedValue(key[:100], f"The value {problem}.")
        return parsed


class CheckedFormParser(_CheckedFormMixin, parsers.FormParser):
    pass


class CheckedMultiPartParser(_CheckedFormMixin, parsers.MultiPartParser):
    pass
