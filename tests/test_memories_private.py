"""Memories of an agent with private user data are its own: stored, deduplicated, read and changed apart from the
memories the tenant's other agents share."""

import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection

from common.text import text_hash
from memories.models import Memory
from tests.conftest import OBSERVE, OUTCOME, RETRIEVE, SEARCH, make_client, make_memory

pytestmark = pytest.mark.django_db

LESSON = {
    "user_id": "alice",
    "user_message": "How do I rotate the staging database credentials safely?",
    "assistant_message": "Use the vault rotate command for the staging role, then restart the workers so they pick up the new lease.",
    "meta": {"type": "procedure", "topic": "credential rotation"},
}
QUERY = {"user_id": "alice", "query": "rotate staging database credentials"}
BASTION = (
    "Use the staging bastion host to reach the internal database, and keep the tunnel open while the migration "
    "scripts run against the replica in the eu region."
)
BASTION_LONGER = BASTION.replace("internal database", "internal postgres database")


def _shared_and_private():
    from agents.authentication import verified_keys_forget

    shared = make_client(["resolve", "feedback"], name="agent-shared")
    private = make_client(["resolve", "feedback"], name="agent-private")
    private.agent.private_user_data = True
    private.agent.save()
    verified_keys_forget()
    return shared, private


def _observe(client, text, **meta):
    body = {"user_id": "alice", "user_message": "remember this please", "assistant_message": text, "meta": meta}
    r = client.post(OBSERVE, body, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def _retrieved(client, query=QUERY):
    r = client.post(RETRIEVE, query, format="json")
    assert r.status_code == 200, r.content
    return [i["id"] for i in r.json()["items"]]


def test_a_private_agent_keeps_its_own_copy_of_a_text_a_shared_agent_stored():
    shared, private = _shared_and_private()
    first = shared.post(OBSERVE, LESSON, format="json")
    assert first.status_code == 200 and first.json()["decision"] == "saved"
    second = private.post(OBSERVE, LESSON, format="json")
    assert second.status_code == 200, second.content  # not 409: the live copy is per owner
    assert second.json()["decision"] == "saved"
    mid_shared, mid_private = first.json()["memory_id"], second.json()["memory_id"]
    assert mid_shared != mid_private
    rows = {m.pk: m for m in Memory.objects.exclude(status="deprecated")}
    assert set(rows) == {mid_shared, mid_private}
    assert rows[mid_shared].content_sha256 == rows[mid_private].content_sha256
    assert rows[mid_shared].private_agent_id is None and rows[mid_shared].agent_id == shared.agent.pk
    assert rows[mid_private].private_agent_id == private.agent.pk == rows[mid_private].agent_id
    assert _retrieved(shared) == [mid_shared]
    assert _retrieved(private) == [mid_private]
    # the same text again: each agent's dedupe finds its own copy
    assert private.post(OBSERVE, LESSON, format="json").json()["memory_id"] == mid_private
    assert shared.post(OBSERVE, LESSON, format="json").json()["memory_id"] == mid_shared
    assert Memory.objects.count() == 2


def test_a_concurrent_duplicate_of_the_same_owner_still_resolves_to_its_row(monkeypatch):
    """Dedupe missed the row (a race): the unique constraint stops the insert and the owner's own row answers."""
    shared, private = _shared_and_private()
    mid_shared = shared.post(OBSERVE, LESSON, format="json").json()["memory_id"]
    mid_private = private.post(OBSERVE, LESSON, format="json").json()["memory_id"]
    monkeypatch.setattr("memories.services.store.memory_neighbours", lambda **kwargs: [])
    for client, mid in ((private, mid_private), (shared, mid_shared)):
        r = client.post(OBSERVE, LESSON, format="json")
        assert r.status_code == 200, r.content
        assert r.json()["decision"] == "skipped" and r.json()["memory_id"] == mid
        assert r.json()["evidence"]["rule"] == "exact"
    assert Memory.objects.count() == 2


def test_a_shared_agent_reads_and_changes_no_private_memory():
    shared, private = _shared_and_private()
    mid = private.post(OBSERVE, LESSON, format="json").json()["memory_id"]
    assert _retrieved(shared) == []
    for mode in ("both", "semantic", "substring"):
        r = shared.post(SEARCH, {"user_id": "alice", "query": "vault rotate", "mode": mode}, format="json")
        assert r.status_code == 200 and r.json()["results"] == [], r.json()
    found = private.post(SEARCH, {"user_id": "alice", "query": "vault rotate"}, format="json").json()["results"]
    assert [h["id"] for h in found] == [mid]
    by_id = shared.post(OUTCOME, {"user_id": "alice", "memory_ids": [mid], "outcome": "failure"}, format="json")
    assert by_id.status_code == 404 and by_id.json()["fields"] == {"memory_ids": [f"Unknown memory id(s): {mid}."]}
    # the user's last retrieval is the private agent's: the shared agent's "last" and reply change nothing
    assert _retrieved(private) == [mid]
    last = shared.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "failure"}, format="json")
    assert last.status_code == 404 and last.json()["fields"] == {"memory_ids": ["The last retrieval returned no memories."]}
    reply = {"user_id": "alice", "user_message": "that didn't work", "assistant_message": "Sorry about that."}
    answered = shared.post(OBSERVE, reply, format="json").json()
    assert answered["evidence"]["outcome_signal"]["memory_ids"] == []
    row = Memory.objects.get(pk=mid)
    assert row.status == "candidate" and row.hits == 1
    own = private.post(OUTCOME, {"user_id": "alice", "memory_ids": [mid], "outcome": "failure"}, format="json")
    assert own.status_code == 200 and Memory.objects.get(pk=mid).status == "deprecated"  # its owner still can


def test_dedupe_merges_only_into_the_owners_memories():
    shared, private = _shared_and_private()
    mid_shared = _observe(shared, BASTION, type="pattern")["memory_id"]
    # a near-duplicate of the shared agent's memory: the private agent stores its own
    saved = _observe(private, BASTION_LONGER, type="pattern")
    assert saved["decision"] == "saved" and saved["memory_id"] != mid_shared
    mid_private = saved["memory_id"]
    theirs = Memory.objects.get(pk=mid_shared)
    assert theirs.content == BASTION and theirs.version == 1 and theirs.hits == 0
    # a near-duplicate of its own: merged into its own, as for a shared agent
    merged = _observe(private, BASTION, type="pattern")
    assert merged["decision"] == "merged" and merged["memory_id"] == mid_private, merged
    mine = Memory.objects.get(pk=mid_private)
    assert mine.version == 2 and mine.hits == 1 and mine.private_agent_id == private.agent.pk
    # and the shared agent's near-duplicate merges into the shared memory, not the private one
    again = _observe(shared, BASTION_LONGER, type="pattern")
    assert again["decision"] == "merged" and again["memory_id"] == mid_shared
    assert Memory.objects.get(pk=mid_private).version == 2


def test_a_new_version_keeps_its_predecessors_owner():
    _, private = _shared_and_private()
    old = _observe(private, "The payments API request timeout should be set to 30 seconds for batch jobs.", type="pattern")
    new = _observe(private, "The payments API request timeout should be set to 90 seconds for batch jobs.", type="pattern")
    assert new["decision"] == "new_version" and new["evidence"]["deprecated_memory_id"] == old["memory_id"], new
    row = Memory.objects.get(pk=new["memory_id"])
    assert row.supersedes_id == old["memory_id"] and row.private_agent_id == private.agent.pk


def test_the_migration_gives_a_private_agents_memories_to_it():
    shared, private = _shared_and_private()
    theirs = make_memory(agent=private.agent)  # written before the column: no owner yet
    other = make_memory(content="Always tag the release commit before building the production images.", agent=shared.agent)
    unknown = make_memory(content="Keep the staging and production settings files in separate directories.")
    assert theirs.private_agent_id is None
    assert Memory.objects.filter(content_sha256=text_hash(theirs.content)).count() == 1
    migration = importlib.import_module("memories.migrations.0004_memory_private_agent")
    migration.memories_private_agent_backfill(apps, SimpleNamespace(connection=connection))
    for row in (theirs, other, unknown):
        row.refresh_from_db()
    assert theirs.private_agent_id == private.agent.pk
    assert other.private_agent_id is None and unknown.private_agent_id is None
    assert _retrieved(private, {"user_id": "alice", "query": theirs.content}) == [theirs.pk]


def test_a_private_agents_quarantined_lesson_is_released_as_its_own_memory():
    """The gate blocks a lesson of a private agent's user; the reviewer edits the secret out and releases it: the
    memory is that agent's (the shared agents never read it), not a shared one."""
    from memories.models import MemoryQuarantine
    from memories.services.quarantine import quarantine_release

    shared, private = _shared_and_private()
    body = {
        "user_id": "alice",
        "user_message": "How do I reach the S3 bucket for the nightly export?",
        "assistant_message": "Use the access key AKIAIOSFODNN7EXAMPLQ with the deploy role for the nightly export job.",
    }
    blocked = private.post(OBSERVE, body, format="json").json()
    assert blocked["decision"] == "blocked"
    item = MemoryQuarantine.objects.get(pk=blocked["evidence"]["quarantine_id"])
    assert item.private_agent_id == private.agent.pk
    edited = "Use the deploy role's own credentials from the vault for the nightly export job to the S3 bucket."
    result = quarantine_release(item=item, actor="rita", content=edited)
    memory = Memory.objects.get(pk=result.memory_id)
    assert memory.private_agent_id == private.agent.pk and memory.agent_id == private.agent.pk
    query = {"user_id": "alice", "query": "nightly export S3 bucket credentials"}
    assert [i["id"] for i in private.post(RETRIEVE, query, format="json").json()["items"]] == [memory.pk]
    assert shared.post(RETRIEVE, query, format="json").json()["items"] == []
    shared_item = shared.post(OBSERVE, body, format="json").json()
    released = quarantine_release(
        item=MemoryQuarantine.objects.get(pk=shared_item["evidence"]["quarantine_id"]), actor="rita", content=edited
    )
    assert Memory.objects.get(pk=released.memory_id).private_agent_id is None  # a shared agent's stays shared
