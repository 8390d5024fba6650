"""Handing an agent's private memories to the tenant's shared agents, once the agent is no longer private."""

import logging

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.selectors import agent_shared_required
from common.api import Conflict
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval, MemoryStatus

logger = logging.getLogger(__name__)

CONFLICTS_LISTED = 20


def private_memories_share(*, agent, dry_run: bool = False) -> dict:
    """The memories, quarantined lessons and retrieval log rows ``agent`` owns (written while its user data was
    private) become the tenant's shared data, in one transaction. A live memory whose user already has a live shared
    copy of the same text stays the agent's and is listed (one live copy per text and owner). Refused while the
    agent's user data is still private."""
    shared_copy = Memory.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        namespace=OuterRef("namespace"),
        user_id=OuterRef("user_id"),
        content_sha256=OuterRef("content_sha256"),
        private_agent__isnull=True,
    ).exclude(status=MemoryStatus.DEPRECATED)
    try:
        with transaction.atomic():
            agent_shared_required(agent=agent)
            rows = list(
                Memory.objects.select_for_update().filter(private_agent=agent).annotate(taken=Exists(shared_copy)).order_by("pk")
            )
            kept = [m for m in rows if m.taken and m.status != MemoryStatus.DEPRECATED]
            moving = [m.pk for m in rows if m not in kept]
            quarantined = MemoryQuarantine.objects.filter(private_agent=agent)
            retrievals = MemoryRetrieval.objects.filter(private_agent=agent)
            counts = {"quarantined": quarantined.count(), "retrievals": retrievals.count()}
            if not dry_run:
                Memory.objects.filter(pk__in=moving).update(private_agent=None, updated_at=timezone.now())
                if moving:
                    Memory.history.bulk_history_create(
                        list(Memory.objects.filter(pk__in=moving)),
                        update=True,
                        default_change_reason=f"shared: agent {agent.name} no longer private",
                    )
                quarantined.update(private_agent=None)
                retrievals.update(private_agent=None)
    except IntegrityError:  # a shared copy of one of these texts was stored meanwhile
        raise Conflict("Shared memories changed meanwhile; nothing was moved. Run it again.", field="agent") from None
    result = {
        "agent": agent.name,
        "dry_run": dry_run,
        "memories_shared": len(moving),
        "memories_kept": len(kept),
        "quarantined_shared": counts["quarantined"],
        "retrievals_shared": counts["retrievals"],
        "conflicts": [{"id": m.pk, "user_id": m.user_id, "content": m.content[:120]} for m in kept[:CONFLICTS_LISTED]],
    }
    logger.info("private memories of agent %s shared: %s", agent.name, {k: v for k, v in result.items() if k != "conflicts"})
    return result
