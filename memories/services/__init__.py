"""Writes for memories: observe (extract → gate → dedupe → store), retrieve, feedback, review, purge.

Each service is one transaction; writes of one user's memories are serialised with a
transaction-level advisory lock; counters use ``F()`` expressions. Modules by concept:
``store`` (observe), ``retrieval``, ``lifecycle`` (feedback, review, purge, embedding),
``quarantine``, ``outcomes`` (outcome signals from a conversation); ``shared`` holds their helpers.
"""

from memories.services.lifecycle import (
    memories_embed,
    memories_embed_backfill,
    memories_purge_deprecated,
    memory_deprecate,
    memory_feedback_apply,
    memory_promote,
)
from memories.services.outcomes import memory_outcome_signal_apply
from memories.services.quarantine import quarantine_discard, quarantine_release
from memories.services.retrieval import RetrieveResult, memory_retrieve
from memories.services.store import BLOCKED, DECISION_NAMES, ObserveResult, memory_observe, memory_store

__all__ = [
    "BLOCKED",
    "DECISION_NAMES",
    "ObserveResult",
    "RetrieveResult",
    "memories_embed",
    "memories_embed_backfill",
    "memories_purge_deprecated",
    "memory_deprecate",
    "memory_feedback_apply",
    "memory_observe",
    "memory_outcome_signal_apply",
    "memory_promote",
    "memory_retrieve",
    "memory_store",
    "quarantine_discard",
    "quarantine_release",
]
