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


def charset_problem(content_type: str, query: bytes | str = b"") -> str | None:
    """Why a request with this ``Content-Type`` and ``query`` string would fail inside Django before its handlers,
    or None. Django looks the charset up, then decodes the query string with it as it builds the request
    (``QueryDict``; a WSGI server hands over bytes, an ASGI one text)."""
    if "charset" not in content_type.lower():
        return None
    try:
        charset = parse_header_parameters(content_type)[1].get("charset")
    except (ValueError, LookupError) as exc:  # malformed (an RFC 2231 value in an unknown encoding): Django fails too
        return f"The Content-Type cannot be read: {exc}."
    if not charset:
        return None
    try:
        codec = codecs.lookup(charset)
    except LookupError:
        return None  # unknown: Django ignores it
    except ValueError:  # a NUL in the name: Django's lookup raises too
        return f"The charset {charset!r} is not a valid name."
    if codec.name == "utf-8" or not query:
        return None  # what Django reads anyway, or nothing to decode; a non-text codec still fails below
    try:
        b"a".decode(charset)  # not b"": decoding nothing returns "" without asking the codec
    except LookupError:  # "... is not a text encoding"
        return f"The charset {charset!r} is not a text encoding."
    except ValueError:  # a text encoding that cannot decode this byte alone (utf-16): readable
        pass
    try:
        QueryDict(query, encoding=charset)  # what Django does with them
    except (LookupError, UnicodeError):
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


def asgi_guard(app, *, exempt: tuple[str, ...] = ("/mcp",)):
    """``exempt``: path prefixes served by another app than Django (the MCP server reads no charset)."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and not scope.get("path", "").startswith(exempt):
            content_type = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"content-type"), "")
            problem = charset_problem(content_type, scope.get("query_string", b"").decode("utf-8", "replace"))
            if problem is not None:
                body = _body(problem)
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
