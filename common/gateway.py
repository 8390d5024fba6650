"""A guard in front of Django (WSGI and ASGI) for a request Django cannot answer itself.

A ``Content-Type`` whose charset names a codec that is not a text encoding (``base64``, ``zlib``, ``rot13``)
passes Django's check (``codecs.lookup`` knows it), and Django then fails to decode the query string while it
builds the request, before any middleware or error handler runs: the client would get the server's bare 500
page. Likewise a text codec that fails on the query string in other ways (``undefined``, ``punycode``). The guard
answers 400 in the API's error shape instead. Unknown charsets are left alone (Django ignores them and reads
UTF-8)."""

import codecs
import json

from django.http import QueryDict
from django.utils.http import parse_header_parameters


def charset_problem(content_type: str, query: bytes = b"") -> str | None:
    """Why a request with this ``Content-Type`` and raw ``query`` string would fail inside Django before its
    handlers, or None. Django decodes the query string with the charset as it builds the request (``QueryDict``)."""
    if "charset" not in content_type.lower():
        return None
    charset = parse_header_parameters(content_type)[1].get("charset")
    if not charset:
        return None
    try:
        codecs.lookup(charset)
    except (LookupError, ValueError):
        return None  # unknown: Django ignores it
    try:
        b"a".decode(charset)  # not b"": decoding nothing returns "" without asking the codec
    except LookupError:  # "... is not a text encoding"
        return f"The charset {charset!r} is not a text encoding."
    except ValueError:  # a text encoding that cannot decode this byte alone (utf-16): readable
        pass
    try:
        QueryDict(query, encoding=charset)  # what Django does with them
    except Exception:  # any codec error Django would not answer
        return f"The query string cannot be read in the charset {charset!r}."
    return None


def _body(problem: str) -> bytes:
    return json.dumps({"detail": problem, "code": "unsupported_charset", "fields": {"content_type": [problem]}}).encode()


def wsgi_guard(app):
    def guarded(environ, start_response):
        problem = charset_problem(environ.get("CONTENT_TYPE", ""), environ.get("QUERY_STRING", "").encode("iso-8859-1"))
        if problem is None:
            return app(environ, start_response)
        body = _body(problem)
        start_response("400 Bad Request", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return guarded


def asgi_guard(app):
    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            content_type = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"content-type"), "")
            problem = charset_problem(content_type, scope.get("query_string", b""))
            if problem is not None:
                body = _body(problem)
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
