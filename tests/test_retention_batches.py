"""Purges of tables every request writes go in short transactions of a few thousand rows, never in one statement
over the whole backlog; a row another transaction holds is left for the next run instead of waited for."""

import threading
import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import IdempotentRequest
from agents.services import idempotent_requests_purge
from common import db
from common.api import ApplicationError
from learning.models import ResolutionRecord
from learning.services.decisions import resolution_records_purge
from tenants.context import tenant_scope
from tests.conftest import make_client


def _records(n: int, *, days_old: int) -> list[int]:
    rows = [
        ResolutionRecord(request_id=uuid.uuid4(), text=f"t{i}", normalized=f"t{i}", outcome="resolved", rule="fixed")
        for i in range(n)
    ]
    ResolutionRecord.objects.bulk_create(rows)
    ids = [r.pk for r in rows]
    ResolutionRecord.objects.filter(pk__in=ids).update(created_at=timezone.now() - timezone.timedelta(days=days_old))
    return ids


@pytest.mark.django_db
def test_old_resolution_records_go_in_batches_and_recent_ones_stay(monkeypatch):
    monkeypatch.setattr(db, "PURGE_BATCH", 3)
    _records(10, days_old=91)
    recent = _records(2, days_old=1)
    with CaptureQueriesContext(connection) as queries:
        assert resolution_records_purge() == 10
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 4  # 3 + 3 + 3 + 1, each its own statement (and transaction)
    assert sorted(ResolutionRecord.objects.values_list("pk", flat=True)) == sorted(recent)
    assert resolution_records_purge() == 0


@pytest.mark.django_db
def test_expired_idempotent_answers_go_in_batches(monkeypatch):
    monkeypatch.setattr(db, "PURGE_BATCH", 2)
    agent = make_client(["resolve"]).agent
    IdempotentRequest.objects.bulk_create(
        [IdempotentRequest(agent=agent, key=f"k{i}", method="POST", path="/x", request_hash="h") for i in range(5)]
    )
    IdempotentRequest.objects.update(created_at=timezone.now() - timezone.timedelta(days=2))
    with CaptureQueriesContext(connection) as queries:
        assert idempotent_requests_purge() == 5
    assert sum(q["sql"].startswith("DELETE") for q in queries.captured_queries) == 3
    assert not IdempotentRequest.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_row_held_by_another_transaction_is_left_for_the_next_run():
    from tenants.selectors import tenant_default

    tenant = tenant_default().pk  # its id after the other tests' flushes
    with tenant_scope([tenant]):
        ids = _records(5, days_old=91)
    held, release = threading.Event(), threading.Event()

    def holder():
        try:
            with tenant_scope([tenant]), transaction.atomic():
                ResolutionRecord.objects.select_for_update().filter(pk=ids[2]).get()
                held.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        with tenant_scope([tenant]):
            assert resolution_records_purge() == 4  # not blocked: the held row is skipped
    finally:
        release.set()
        thread.join(30)
    with tenant_scope([tenant]):
        assert list(ResolutionRecord.objects.values_list("pk", flat=True)) == [ids[2]]
        assert resolution_records_purge() == 1


@pytest.mark.django_db
def test_old_ambiguous_answers_go_with_their_signals_and_what_they_taught_stays(api, cbus, run_tasks, monkeypatch):
    from learning.models import AbandonEvent, DisambiguationRequest, LearnedPhrase, LearningCandidate, LearningSignal
    from learning.services.disambiguations import disambiguations_purge
    from learning.tasks import resolution_records_purge_task
    from tests.test_learning_disambiguation import abandon, resolve, select

    monkeypatch.setattr(db, "PURGE_BATCH", 1)
    asked = {}
    for user in ("ann", "bob", "cat", "dan"):
        body = resolve(api, "list all cbus", user_id=user)
        assert body["outcome"] == "ambiguous"
        asked[user] = body["request_id"]
    assert run_tasks(select, api, asked["ann"], "cbu.list").status_code == 200  # learned from
    assert run_tasks(abandon, api, asked["bob"], "closed_session").status_code == 200
    assert select(api, asked["cat"], "cbu.list").status_code == 200  # its signals not learned from yet
    # dan's stays open
    DisambiguationRequest.objects.update(created_at=timezone.now() - timezone.timedelta(days=91))
    taught = LearnedPhrase.objects.filter(user_id="ann").count(), LearningCandidate.objects.count()

    with pytest.raises(ApplicationError, match="at least 1 day"):
        disambiguations_purge(days=0)
    assert resolution_records_purge_task() == {"records": 0, "disambiguations": 2, "import_jobs": 0}
    left = DisambiguationRequest.objects.values_list("request_id", flat=True)
    assert {str(r) for r in left} == {asked["cat"], asked["dan"]}
    assert not LearningSignal.objects.filter(request__isnull=True).exists()
    assert set(LearningSignal.objects.values_list("request__request_id", flat=True)) <= set(left)
    assert not AbandonEvent.objects.exists()
    assert (LearnedPhrase.objects.filter(user_id="ann").count(), LearningCandidate.objects.count()) == taught


@pytest.mark.django_db
def test_deprecated_memories_go_in_batches_and_one_restored_meanwhile_stays(monkeypatch):
    from memories.models import Memory, MemoryStatus
    from memories.services.lifecycle import memories_purge_deprecated
    from tests.conftest import make_memory

    monkeypatch.setattr(db, "PURGE_BATCH", 2)
    old = [make_memory(content=f"Lesson {i}: always run the migrations before deploying service {i}.") for i in range(5)]
    Memory.objects.filter(pk__in=[m.pk for m in old]).update(
        status=MemoryStatus.DEPRECATED, deprecated_at=timezone.now() - timezone.timedelta(days=100)
    )
    Memory.objects.filter(pk=old[4].pk).update(status=MemoryStatus.VERIFIED)  # restored before the purge reached it
    with CaptureQueriesContext(connection) as queries:
        counts = memories_purge_deprecated(older_than=timezone.timedelta(days=90))
    assert counts["memories"] == 4
    memory_deletes = [q for q in queries.captured_queries if q["sql"].startswith('DELETE FROM "memories_memory"')]
    assert len(memory_deletes) == 2  # 2 + 2, each in its own transaction
    assert list(Memory.objects.values_list("pk", flat=True)) == [old[4].pk]
