"""Quarantine: reviewers release (through the gate and dedupe) or discard what the write gate blocked."""

from contextlib import nullcontext

from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from common.api import ApplicationError, Conflict
from memories import write_gate
from memories.extraction import Artifact
from memories.models import MemoryQuarantine, QuarantineStatus
from memories.services.store import BLOCKED, ObserveResult, memory_store
from tenants.context import acting_agent, tenant_scope


def quarantine_release(*, item: MemoryQuarantine, actor: str, content: str | None = None) -> ObserveResult:
    """Store a quarantined lesson after a reviewer edited out what the gate caught.

    The (edited) preview must pass the write-gate now and hold no ``[REDACTED`` marker; then it
    goes through the normal dedupe and is saved as a candidate. All or nothing: the item is
    locked, so two reviewers cannot release it twice.
    """
    text = (content if content is not None else item.redacted_preview).strip()
    if "[REDACTED" in text:
        raise ApplicationError("Edit out the [REDACTED:…] markers before releasing.", field="redacted_preview")
    gate = write_gate.check(text)
    if not gate.allowed:
        raise ApplicationError(f"Still blocked: {gate.message}", field="redacted_preview")
    # in the item's tenant, whoever decides (a reviewer of two tenants, a superuser who sees all): the memory is
    # stored there and deduplicated against that tenant's memories only
    with tenant_scope([item.tenant_id]), transaction.atomic():
        # The owner first, locked, then the item: the order in which sharing the agent's private data takes them
        # (agents.selectors.agent_shared_required, then the items), so a share waits for a release and moves what
        # it stored, or the release sees the item shared.
        owner_id = MemoryQuarantine.objects.filter(pk=item.pk).values_list("private_agent_id", flat=True).first()
        owner = Agent.objects.select_for_update().filter(pk=owner_id).first() if owner_id else None
        locked = MemoryQuarantine.objects.select_for_update().get(pk=item.pk)
        if locked.status != QuarantineStatus.PENDING:
            raise ApplicationError(f"This item is already {locked.status}.", field="status")
        if locked.private_agent_id is None:  # never private, or shared meanwhile
            owner = None
        elif owner is None or locked.private_agent_id != owner.pk:  # its owner deleted or changed meanwhile
            raise Conflict("This item's owner changed meanwhile; release it again.", field="status")
        artifact = Artifact(
            memory_type=locked.memory_type, topic=locked.topic, content=text, tags=list(locked.tags), extractor="reviewer"
        )
        # a lesson of a private agent's user is released as that agent's memory (deduplicated against its own)
        with acting_agent(owner) if owner is not None else nullcontext():
            result = memory_store(
                user_id=locked.user_id,
                namespace=locked.namespace,
                artifact=artifact,
                metadata=locked.metadata,
                source_session_id=locked.source_session_id,
                source_message_id=locked.source_message_id,
                extractor="reviewer",
                quarantine_on_block=False,
            )
        if result.decision == BLOCKED:  # the topic, tags or filters still hold a secret
            raise ApplicationError(f"Still blocked: {result.evidence.get('message', '')}", field="redacted_preview")
        locked.status = QuarantineStatus.RELEASED
        locked.redacted_preview = text
        locked.released_memory_id = result.memory_id
        locked.reviewed_by = actor
        locked.reviewed_at = timezone.now()
        locked.save(update_fields=["status", "redacted_preview", "released_memory", "reviewed_by", "reviewed_at"])
    item.refresh_from_db()
    return result


def quarantine_discard(*, item: MemoryQuarantine, actor: str) -> None:
    """A reviewer drops a quarantined lesson (it stays listed as discarded)."""
    with tenant_scope([item.tenant_id]), transaction.atomic():
        updated = MemoryQuarantine.objects.filter(pk=item.pk, status=QuarantineStatus.PENDING).update(
            status=QuarantineStatus.DISCARDED, reviewed_by=actor, reviewed_at=timezone.now()
        )
    if not updated:
        raise ApplicationError("This item is not pending any more.", field="status")
