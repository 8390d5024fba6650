"""Erasure of one user's memories (a data subject's request): every row that names the user, and its history."""

import logging

from django.db import transaction

from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from memories.services.shared import user_lock

logger = logging.getLogger(__name__)


def user_memories_erase(*, user_id: str, dry_run: bool = False) -> dict:
    """Delete, in the caller's tenant scope and in one transaction, every memory of ``user_id`` in every namespace
    and agent's scope (with the write decisions that explain them), their quarantined lessons and retrieval logs,
    then every audit-trail row that names them. Each (namespace, agent) scope's lock is taken first, so an observe
    running meanwhile finishes before, or starts after. ``dry_run``: count only.

    Answers ``{"rows": {table: n}, "history": {table: n}, "quarantine_ids": [...]}``."""
    models = (Memory, MemoryQuarantine, MemoryRetrieval)
    rows, history = {}, {}
    with transaction.atomic():
        scopes = set()
        for model in models:
            scopes |= set(model.objects.filter(user_id=user_id).values_list("namespace", "private_agent_id").distinct())
        for namespace, private_agent in sorted(scopes, key=lambda s: (s[0], s[1] or 0)):
            user_lock(namespace=namespace, user_id=user_id, private_agent=private_agent)
        quarantine_ids = list(MemoryQuarantine.objects.filter(user_id=user_id).values_list("pk", flat=True))
        for model in models:
            qs = model.objects.filter(user_id=user_id)
            rows[model._meta.db_table] = qs.count() if dry_run else qs.delete()[1].get(model._meta.label, 0)
        for model in models:
            if hasattr(model, "history"):
                qs = model.history.model.objects.filter(user_id=user_id)
                history[model.history.model._meta.db_table] = qs.count() if dry_run else qs.delete()[0]
    rows = {k: v for k, v in rows.items() if v}
    history = {k: v for k, v in history.items() if v}
    if not dry_run:
        logger.info("erased the memories of a user: %s rows, %s audit-trail rows", sum(rows.values()), sum(history.values()))
    return {"rows": rows, "history": history, "quarantine_ids": quarantine_ids}
