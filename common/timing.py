"""Where a request's time went: named steps timed with ``timed(name)`` and sent back in the standard
``Server-Timing`` response header (``embed;dur=6.12, tiers;dur=3.40, total;dur=14.90``, milliseconds), which
browsers' developer tools and APM agents read. Outside a request (a task, a command) ``timed`` does nothing.

Only durations of named steps are sent, never what a step found. ``SERVER_TIMING`` (default on) turns it off."""

from contextlib import contextmanager
from contextvars import ContextVar
from time import perf_counter

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed

_spans: ContextVar[dict | None] = ContextVar("server_timing", default=None)


@contextmanager
def timed(name: str):
    """Add the block's wall time to step ``name`` of the current request (a step timed twice adds up)."""
    spans = _spans.get()
    if spans is None:
        yield
        return
    started = perf_counter()
    try:
        yield
    finally:
        spans[name] = spans.get(name, 0.0) + (perf_counter() - started) * 1000.0


def header_value(spans: dict) -> str:
    """{"embed": 6.12, "total": 14.9} -> ``embed;dur=6.12, total;dur=14.90``."""
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in spans.items())


def header_parse(value: str) -> dict:
    """Inverse of ``header_value`` (for clients, tests and benchmarks): the steps that carry a duration."""
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name and dur:
            out[name] = float(dur)
    return out


class ServerTimingMiddleware:
    """Collects the steps timed while a request runs and adds them, with ``total`` (the request inside Django),
    to the response's ``Server-Timing`` header. First in the middleware list, so ``total`` covers the others."""

    def __init__(self, get_response):
        if not settings.SERVER_TIMING:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        spans: dict = {}
        token = _spans.set(spans)
        started = perf_counter()
        try:
            response = self.get_response(request)
        finally:
            _spans.reset(token)
        spans["total"] = (perf_counter() - started) * 1000.0
        response["Server-Timing"] = header_value(spans)
        return response
