"""A memory search counts the user's live memories once: both statuses are scanned exactly when they are few
together, and each is counted on its own (the index walked for the larger one) when they are not."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from learning.resolution import embed_query
from memories.models import Memory
from memories.selectors import memory_semantic_candidates
from tests.conftest import LOG_LESSONS, seed_memories

pytestmark = pytest.mark.django_db

QUERY = "How are the application logs rotated?"


def _search(vector, model):
    with CaptureQueriesContext(connection) as ctx:
        items = memory_semantic_candidates(
            user_id="alice", namespace="learning", vector=vector, model=model, filters=None, k=6, min_score=-1.0
        )
    counts = [q["sql"] for q in ctx.captured_queries if "COUNT(" in q["sql"].upper()]
    walks = [q["sql"] for q in ctx.captured_queries if "<=>" in q["sql"] and "+ 0" not in q["sql"]]
    return items, counts, walks


def _exact_order(rows, vector) -> list[int]:
    """The rows' ids, nearest to ``vector`` first, by their stored vectors."""
    v = np.asarray(vector, dtype=np.float64)
    stored = {m.pk: np.asarray(m.embedding, dtype=np.float64) for m in Memory.objects.filter(pk__in=[r.pk for r in rows])}
    return sorted(stored, key=lambda pk: -float(stored[pk] @ v / np.linalg.norm(stored[pk])))


def test_few_memories_are_counted_once_and_scanned_exactly():
    verified = seed_memories(texts=LOG_LESSONS[:3], status="verified")
    candidates = seed_memories(texts=LOG_LESSONS[3:], status="candidate")
    vector, model, _ = embed_query(QUERY)
    items, counts, walks = _search(vector, model)
    assert len(counts) == 1 and walks == []
    assert [i.memory.pk for i in items] == _exact_order(verified, vector) + _exact_order(candidates, vector)


def test_many_memories_are_counted_per_status_and_still_complete(settings):
    settings.NEAREST_EXACT_MAX_ROWS = 4  # 8 live together: each status counted on its own
    verified = seed_memories(texts=LOG_LESSONS[:6], status="verified")
    candidates = seed_memories(texts=LOG_LESSONS[6:], status="candidate")
    vector, model, _ = embed_query(QUERY)
    items, counts, walks = _search(vector, model)
    assert len(counts) == 3  # both together, then each status
    assert len(walks) == 1  # the six verified ones walk the index; the two candidates are scanned exactly
    by_status = {s: [i.memory.pk for i in items if i.memory.status == s] for s in ("verified", "candidate")}
    assert by_status["verified"] == _exact_order(verified, vector)
    assert sorted(by_status["candidate"]) == sorted(m.pk for m in candidates)
