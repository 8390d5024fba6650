"""Helpers shared by the memory services: namespace default, per-user lock, embedding schedule, auto-promotion."""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from common.db import tenant_lock
from common.tasks import task_headers, task_send
from memories.models import Memory, MemoryStatus
from tenants.context import private_agent_id

logger = logging.getLogger(__name__)


def namespace_or_default(*, value: str | None) -> str:
    return value or settings.MEMORY_DEFAULT_NAMESPACE


_ACTING = object()


def user_lock(*, namespace: str, user_id: str, private_agent: int | None | object = _ACTING) -> None:
    """Serialise writes to one user's memories (in this tenant, namespace and private agent's scope: the acting
    agent's unless ``private_agent`` names one, None for the shared agents) until the transaction ends; users of
    other tenants or agents never wait on each other."""
    # the tenant as the database gives it to the rows written (the ``tenant`` column's default)
    key = f"{private_agent_id() if private_agent is _ACTING else private_agent}:{namespace}:{user_id}"
    tenant_lock("memory:", key)


def user_scopes_lock(*, user_id: str, scopes) -> None:
    """``user_lock`` for each (namespace, private agent) of ``scopes``, in one order: a writer of memories of several
    of a user's scopes (an outcome, an erasure) never waits on a writer of one of them in a cycle."""
    for namespace, private_agent in sorted(set(scopes), key=lambda s: (s[0], s[1] or 0)):
        user_lock(namespace=namespace, user_id=user_id, private_agent=private_agent)


def embedding_schedule(*, ids: list[int]) -> None:
    """Embed these memories through the Celery task: now when eager, else after commit. Never raises."""
    if not ids:
        return
    headers = task_headers()  # the tenant and agent of now: after the commit the scope that wrote them has ended

    def send():
        try:
            task_send("memories.tasks.memory_embed", ids, headers=headers)
        except Exception as exc:  # broker down or embedder down: the next retrieval embeds lazily
            logger.warning("memory_embed for %s not run: %s: %s", ids, exc.__class__.__name__, exc)

    if settings.CELERY_TASK_ALWAYS_EAGER:
        send()
    else:
        transaction.on_commit(send)


def memories_auto_promote(*, ids: list[int]) -> int:
    """One UPDATE: candidates among ``ids`` with streak >= N or hits >= M become verified (lower confidence)."""
    if not ids:
        return 0
    return (
        Memory.objects.filter(pk__in=ids, status=MemoryStatus.CANDIDATE)
        .filter(Q(streak__gte=settings.MEMORY_AUTO_PROMOTE_STREAK) | Q(hits__gte=settings.MEMORY_AUTO_PROMOTE_HITS))
        .update(
            status=MemoryStatus.VERIFIED,
            confidence=Greatest(F("confidence"), Value(settings.MEMORY_AUTO_PROMOTE_CONFIDENCE)),
            verified_at=timezone.now(),
            status_changed_by="auto",
            status_reason=(
                f"auto-promoted: streak >= {settings.MEMORY_AUTO_PROMOTE_STREAK} or hits >= {settings.MEMORY_AUTO_PROMOTE_HITS}"
            ),
        )
    )
