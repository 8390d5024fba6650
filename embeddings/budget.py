"""The embedding budget of a request: writes never wait on the embedder.

``EmbeddingBudgetMiddleware`` gives every request ``EMBEDDING_REQUEST_BUDGET_S`` seconds of embedding in
total (default 2). Inside a request, ``embeddings_compute`` and ``embed_query`` spend what is left, with
no retries; past it a row is stored without its vector (the backfill, ``embeddings.tasks``, fills it) and
the answer carries ``X-Embedding-Pending: 1`` (an MCP tool result: ``_meta.embedding_pending``; an MCP call
has the same budget, ``embedding_budget``). Outside requests (Celery workers, commands, the
backfill) there is no budget and the client's retries apply.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings

_deadline: ContextVar[float | None] = ContextVar("embedding_deadline", default=None)
_pending: ContextVar[list | None] = ContextVar("embedding_pending", default=None)

PENDING_HEADER = "X-Embedding-Pending"


def budget_remaining() -> float | None:
    """Seconds of embedding left to this request (never below 0), or None outside a request."""
    deadline = _deadline.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def budget_mark_pending(count: int) -> None:
    """Note that ``count`` texts of this request were stored without a vector."""
    pending = _pending.get()
    if pending is not None:
        pending.append(count)


def budget_pending() -> int:
    return sum(_pending.get() or [])


@contextmanager
def embedding_budget() -> Iterator[None]:
    """One request's budget (``EMBEDDING_REQUEST_BUDGET_S``) around a REST request or an MCP call."""
    deadline = _deadline.set(time.monotonic() + settings.EMBEDDING_REQUEST_BUDGET_S)
    pending = _pending.set([])
    try:
        yield
    finally:
        _deadline.reset(deadline)
        _pending.reset(pending)


class EmbeddingBudgetMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with embedding_budget():
            request.embedding_pending = budget_pending  # for a view that stores its answer (an idempotent replay)
            response = self.get_response(request)
            if budget_pending() or getattr(response, "embedding_pending", False):  # or a replay of such an answer
                response[PENDING_HEADER] = "1"
            return response
