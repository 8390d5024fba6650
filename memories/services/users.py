"""Erasure of one user's memories (a data subject's request): every row that names the user, and its history."""

from collections.abc import Collection

from django.db import transaction

from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from memories.services.shared import user_scopes_lock


def user_memories_erase(*, user_id: str, dry_run: bool = False, ids_of: Collection[str] | None = None) -> dict:
    """Delete, in the caller's tenant scope and in one transaction, every memory of ``user_id`` in every namespace
    and agent's scope (with the write decisions that explain them), their quarantined lessons and retrieval logs,
    then every audit-trail row that names them. Each (namespace, agent) scope's lock is taken first, so an observe
    running meanwhile finishes before, or starts after. ``dry_run``: count only (the audit-trail rows counted
    include the one each deletion would write). ``ids_of``: the models (by lower-case label, ``app.model``) whose
    row ids to answer (None: all), for the logs that name them.

    Answers ``{"rows": {table: n}, "history": {table: n}, "objects": {model label: ids}}`` (the ids of every row of
    the user's, and of the memories deleted before that the audit trail knew, of the models ``ids_of`` names)."""
    models = (Memory, MemoryQuarantine, MemoryRetrieval)
    rows, history = {}, {}
    with transaction.atomic():
        if not dry_run:
            # the quarantined items first, in key order: a release locks its item, then the user's scope
            list(MemoryQuarantine.objects.filter(user_id=user_id).order_by("pk").select_for_update().values_list("pk"))
            scopes = set()
            for model in models:
                scopes |= set(model.objects.filter(user_id=user_id).values_list("namespace", "private_agent_id").distinct())
            user_scopes_lock(user_id=user_id, scopes=scopes)
        objects = {}
        for model in models:
            if ids_of is not None and model._meta.label_lower not in ids_of:
                continue
            ids = set(model.objects.filter(user_id=user_id).values_list("pk", flat=True))
            if hasattr(model, "history"):
                ids |= set(model.history.model.objects.filter(user_id=user_id).values_list("id", flat=True))
            objects[model._meta.label] = sorted(ids)
        for model in models:
            qs = model.objects.filter(user_id=user_id)
            rows[model._meta.db_table] = qs.count() if dry_run else qs.delete()[1].get(model._meta.label, 0)
        for model in models:
            if hasattr(model, "history"):
                qs = model.history.model.objects.filter(user_id=user_id)
                # a deletion writes one audit-trail row per row deleted: a dry run counts it too
                history[model.history.model._meta.db_table] = (
                    qs.count() + rows[model._meta.db_table] if dry_run else qs.delete()[0]
                )
    rows = {k: v for k, v in rows.items() if v}
    history = {k: v for k, v in history.items() if v}
    return {"rows": rows, "history": history, "objects": objects}
