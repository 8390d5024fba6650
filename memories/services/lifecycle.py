"""Lifecycle: feedback (promotion, demotion), reviewers' promote and deprecate, purge, embedding."""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from tqdm import tqdm

from common.api import ApplicationError, Conflict, NotFound
from common.db import rows_purge
from common.validation import MAX_DAYS
from embeddings.embedders import current_model_name, get_embedder
from embeddings.services import embeddings_batches_refresh, embeddings_refresh
from memories import write_gate
from memories.models import Memory, MemoryRetrieval, MemoryStatus
from memories.selectors import memories_needing_embedding, memories_readable, memory_last_retrieval
from memories.services.shared import namespace_or_default, user_scopes_lock


def memory_feedback_apply(
    *, user_id: str, memory_ids: list[int] | str, outcome: str, reason: str = "", namespace: str | None = None
) -> list[Memory]:
    """``success`` promotes the memories to verified; ``failure`` deprecates them and ends their streak.

    ``memory_ids`` may be ``"last"``: the memories of the user's last retrieval (in ``namespace``, default the
    default namespace). Ids of other users, ids outside ``namespace`` when it is given, and ids of memories the
    caller may not read (for an agent with private user data, those it does not own; for the others, those a
    private agent owns), are answered exactly like unknown ids (404), and then nothing changes. A secret in
    ``reason`` is redacted.
    """
    if outcome not in ("success", "failure"):
        raise ApplicationError("Use success or failure.", field="outcome")
    reason = write_gate.redact(reason)  # kept on the memory and in its history: never a secret the gate would find
    if memory_ids == "last":
        last = memory_last_retrieval(user_id=user_id, namespace=namespace_or_default(value=namespace))
        if last is None:
            raise NotFound("This user has no retrieval yet.", field="memory_ids")
        ids = [i for i in last.memory_ids]
        strict = False
    else:
        ids = list(dict.fromkeys(int(i) for i in memory_ids))
        strict = True
    now = timezone.now()
    with transaction.atomic():
        # what the caller may read: an agent with private user data changes no other agent's memories, nor they its
        readable = memories_readable().filter(user_id=user_id, pk__in=ids)
        if namespace:  # named: ids of another namespace are unknown ids; not named: any namespace of the user
            readable = readable.filter(namespace=namespace)
        # the user's scopes first, as a write of memories (an observe that reports an outcome too) takes them
        user_scopes_lock(user_id=user_id, scopes=readable.values_list("namespace", "private_agent_id").distinct())
        rows = list(readable.select_for_update().order_by("pk"))
        if strict and len(rows) != len(ids):
            missing = sorted(set(ids) - {m.pk for m in rows})
            raise NotFound(f"Unknown memory id(s): {', '.join(map(str, missing))}.", field="memory_ids")
        if not rows:
            raise NotFound("The last retrieval returned no memories.", field="memory_ids")
        for m in rows:
            if outcome == "success":
                if m.status == MemoryStatus.DEPRECATED:
                    continue  # a deprecated memory comes back only through a reviewer
                if m.status != MemoryStatus.VERIFIED or m.verified_at is None:
                    m.verified_at = now
                m.status = MemoryStatus.VERIFIED
                m.confidence = max(m.confidence, settings.MEMORY_PROMOTE_CONFIDENCE)
                m.status_changed_by = "feedback"
                m.status_reason = reason or "positive feedback"
                m.save(update_fields=["status", "confidence", "verified_at", "status_changed_by", "status_reason", "updated_at"])
            else:
                if m.status != MemoryStatus.DEPRECATED:
                    m.deprecated_at = now
                m.status = MemoryStatus.DEPRECATED
                m.streak = 0
                m.status_changed_by = "feedback"
                m.status_reason = reason or "negative feedback"
                m.save(update_fields=["status", "streak", "deprecated_at", "status_changed_by", "status_reason", "updated_at"])
    return rows


def memory_promote(*, memory: Memory, actor: str, reason: str = "") -> Memory:
    """A reviewer verifies a memory (also a deprecated one). A deprecated memory whose text the user has since
    taught again (a live copy for the same user, namespace and owner) is refused (409): promote the live copy. A
    secret in ``reason`` is redacted."""
    try:
        with transaction.atomic():
            m = Memory.objects.select_for_update().get(pk=memory.pk)
            if m.status == MemoryStatus.DEPRECATED:
                _refuse_if_live_copy(m)
            m.status = MemoryStatus.VERIFIED
            m.confidence = max(m.confidence, settings.MEMORY_PROMOTE_CONFIDENCE)
            m.verified_at = timezone.now()
            m.deprecated_at = None
            m.status_changed_by = actor
            m.status_reason = write_gate.redact(reason) or "promoted by a reviewer"
            m.save()
    except IntegrityError:  # a copy went live between the check and the save
        m = Memory.objects.get(pk=memory.pk)
        _refuse_if_live_copy(m)
        raise
    return m


def _refuse_if_live_copy(m: Memory) -> None:
    live = (
        Memory.objects.filter(
            tenant_id=m.tenant_id,
            namespace=m.namespace,
            user_id=m.user_id,
            content_sha256=m.content_sha256,
            private_agent_id=m.private_agent_id,
        )
        .exclude(status=MemoryStatus.DEPRECATED)
        .exclude(pk=m.pk)
        .values_list("pk", flat=True)
        .first()
    )
    if live is not None:
        raise Conflict(
            f"The user has this text as memory {live} already; promote that one.",
            field="memory",
            code="live_copy",
            extra={"live_copy": live},
        )


def memory_deprecate(*, memory: Memory, actor: str, reason: str) -> Memory:
    """A reviewer deprecates a memory; the reason is required (a secret in it is redacted)."""
    if not (reason or "").strip():
        raise ApplicationError("Give a reason for deprecating.", field="reason")
    with transaction.atomic():
        m = Memory.objects.select_for_update().get(pk=memory.pk)
        if m.status != MemoryStatus.DEPRECATED:
            m.deprecated_at = timezone.now()
        m.status = MemoryStatus.DEPRECATED
        m.streak = 0
        m.status_changed_by = actor
        m.status_reason = write_gate.redact(reason.strip())
        m.save()
    return m


PURGE_MIN_AGE = timedelta(days=1)
PURGE_MAX_AGE = timedelta(days=MAX_DAYS)


def memories_purge_deprecated(*, older_than: timedelta, user_id: str | None = None, dry_run: bool = False) -> dict:
    """Delete deprecated memories deprecated (or, without that date, last updated) before now - ``older_than``,
    with their audit trail, and retrieval logs older than that; logs inside MEMORY_OUTCOME_WINDOW_S are always kept (the cutoff is
    clamped), since outcome feedback reads them. ``older_than`` must be 1 day to 100 years. Answers counts."""
    if not PURGE_MIN_AGE <= older_than <= PURGE_MAX_AGE:
        raise ApplicationError(f"The age must be between 1 day and {MAX_DAYS} days (100 years).", field="older_than")
    now = timezone.now()
    cutoff = now - older_than
    retrieval_cutoff = min(cutoff, now - timedelta(seconds=settings.MEMORY_OUTCOME_WINDOW_S))
    memories = Memory.objects.filter(status=MemoryStatus.DEPRECATED).filter(
        Q(deprecated_at__lt=cutoff) | Q(deprecated_at__isnull=True, updated_at__lt=cutoff)
    )
    retrievals = MemoryRetrieval.objects.filter(created_at__lt=retrieval_cutoff)
    if user_id:
        memories = memories.filter(user_id=user_id)
        retrievals = retrievals.filter(user_id=user_id)
    # In batches, each its own transaction. Each batch locks its rows first, and the lock reads them again: a
    # memory promoted or restored meanwhile is no longer deprecated and stays.
    # A purged memory's audit trail goes with it (its text would live on there, a year by HISTORY_RETENTION_DAYS).
    trail = Memory.history.model.objects
    return {
        "memories": rows_purge(memories, dry_run=dry_run, also=lambda ids: trail.filter(id__in=ids).delete()),
        "retrievals": rows_purge(retrievals, dry_run=dry_run),
    }


def memories_embed_backfill(*, batch_size: int = 128, user_id: str | None = None, progress: bool = False) -> dict:
    """Embed every memory (of ``user_id``, or all) whose vector is missing or stale, one committed batch at a time
    (resumable; a failing batch is counted and skipped; ``progress``: a tqdm bar). Answers {"embedded", "failed",
    "model"}; raises EmbeddingError if the embedder cannot load."""
    model = get_embedder().model_name
    pending = memories_needing_embedding(model=model, user_id=user_id)
    with tqdm(total=pending.count(), desc="memories", unit="memory", disable=not progress) as bar:
        embedded, failed = embeddings_batches_refresh(pending=pending, batch_size=batch_size, update=bar.update)
    return {"embedded": embedded, "failed": failed, "model": model}


def memories_embed(*, memory_ids: list[int]) -> int:
    """Embed the given memories whose vector is missing or from another model; answers how many were embedded."""
    model = current_model_name()
    rows = list(Memory.objects.filter(pk__in=memory_ids).filter(Q(embedding__isnull=True) | ~Q(embedding_model=model)))
    return embeddings_refresh(rows=rows) if rows else 0
