"""Outcome signals from a conversation: a later user turn says whether the memories used just before worked.

The memories are those of the retrieval the signal is about (``meta.retrieval_id``, else the user's latest
retrieval with memories within ``MEMORY_OUTCOME_WINDOW_S``); the signal goes through ``memory_feedback_apply``,
so success promotes and failure deprecates by the same rules as ``POST /api/v1/memories/outcome``.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.api import NotFound
from common.text import text_hash
from memories.outcomes import outcome_detect
from memories.selectors import memory_ids_of_user, memory_retrieval_for_outcome
from memories.services.lifecycle import memory_feedback_apply

logger = logging.getLogger(__name__)


def memory_outcome_signal_apply(
    *,
    user_id: str,
    namespace: str,
    user_message: str,
    validation_passed: bool | None = None,
    retrieval_id: int | None = None,
    skip_memory_ids: list[int] | None = None,
) -> dict | None:
    """Detect an outcome in the user's turn and give it to the memories of the retrieval it is about.

    Answers None for a neutral turn, else the evidence: outcome, cue, retrieval id and the memories changed
    (none when no recent retrieval returned memories). ``skip_memory_ids`` are left alone (a memory this turn
    already superseded keeps its reason).
    """
    signal = outcome_detect(user_message, validation_passed=validation_passed)
    if signal is None:
        return None
    window = timedelta(seconds=settings.MEMORY_OUTCOME_WINDOW_S)
    evidence = {"outcome": signal.outcome, "cue": signal.cue, "retrieval_id": None, "memory_ids": []}
    with transaction.atomic():
        retrieval = memory_retrieval_for_outcome(
            user_id=user_id,
            namespace=namespace,
            since=timezone.now() - window,
            exclude_query_sha256=text_hash(user_message),
            retrieval_id=retrieval_id,
        )
        if retrieval is None:
            if retrieval_id is not None:
                raise NotFound(f"Unknown retrieval id: {retrieval_id}.", field="meta.retrieval_id")
            return evidence
        evidence["retrieval_id"] = retrieval.pk
        skip = set(skip_memory_ids or [])
        ids = [i for i in memory_ids_of_user(user_id=user_id, ids=list(retrieval.memory_ids)) if i not in skip]
        if not ids:
            return evidence
        rows = memory_feedback_apply(
            user_id=user_id,
            memory_ids=ids,
            outcome=signal.outcome,
            reason=f"conversation signal '{signal.cue}' after retrieval {retrieval.pk}",
            namespace=namespace,
        )
    evidence["memory_ids"] = [m.pk for m in rows]
    evidence["statuses"] = {str(m.pk): m.status for m in rows}
    logger.info("outcome signal %s (%s) for memories %s of %s", signal.outcome, signal.cue, evidence["memory_ids"], user_id)
    return evidence
