"""Whose retrieval an outcome is about, which namespace an outcome by id may change, and a read-only retrieve that
writes nothing: the retrieval log records its owner (an agent with private user data, or none: shared), outcomes by
id keep to the namespace the client named, and a key without the feedback scope never stores a vector."""

import pytest

from memories.models import Memory, MemoryRetrieval
from memories.services import memories_embed
from tests.conftest import LOG_LESSONS, OBSERVE, OUTCOME, RETRIEVE, make_client, make_memory
from tests.test_memories_private import LESSON, QUERY, _shared_and_private

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def switches_reach_every_process_at_once(settings):
    """Here a switch of the agent's private data is seen at once (no key cache); the wait has its own tests."""
    settings.API_KEY_CACHE_S = 0


FAILED = {"user_id": "alice", "user_message": "that didn't work", "assistant_message": "Sorry about that."}


def _retrieve(client, body=QUERY):
    r = client.post(RETRIEVE, body, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def _both_retrieved():
    """Each agent holds its own copy of the lesson; the private agent retrieves first, the shared agent after it."""
    shared, private = _shared_and_private()
    mid_shared = shared.post(OBSERVE, LESSON, format="json").json()["memory_id"]
    mid_private = private.post(OBSERVE, LESSON, format="json").json()["memory_id"]
    private_log = _retrieve(private)
    assert [i["id"] for i in private_log["items"]] == [mid_private]
    shared_log = _retrieve(shared)
    assert [i["id"] for i in shared_log["items"]] == [mid_shared]
    return shared, private, mid_shared, mid_private, private_log["retrieval_id"], shared_log["retrieval_id"]


def _status(pk):
    return Memory.objects.get(pk=pk).status


# --- the retrieval log records its owner ---------------------------------------------------------


def test_the_retrieval_log_records_the_private_agent_or_none():
    shared, private, _, _, private_rid, shared_rid = _both_retrieved()
    assert MemoryRetrieval.objects.get(pk=private_rid).private_agent_id == private.agent.pk
    assert MemoryRetrieval.objects.get(pk=shared_rid).private_agent_id is None


def test_last_of_a_private_agent_is_its_own_retrieval_not_a_later_shared_one():
    shared, private, mid_shared, mid_private, _, _ = _both_retrieved()
    r = private.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "failure"}, format="json")
    assert r.status_code == 200, r.content
    assert [m["id"] for m in r.json()["memories"]] == [mid_private]
    assert _status(mid_private) == "deprecated" and _status(mid_shared) == "candidate"


def test_last_of_a_shared_agent_is_a_shared_retrieval_not_a_later_private_one():
    shared, private, mid_shared, mid_private, _, _ = _both_retrieved()
    _retrieve(private)  # the user's latest retrieval is now the private agent's again
    r = shared.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "success"}, format="json")
    assert r.status_code == 200, r.content
    assert [m["id"] for m in r.json()["memories"]] == [mid_shared]
    assert _status(mid_shared) == "verified" and _status(mid_private) == "candidate"


def test_last_without_a_retrieval_of_the_callers_own_answers_no_retrieval_yet():
    shared, private = _shared_and_private()
    private.post(OBSERVE, LESSON, format="json")
    _retrieve(private)
    r = shared.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "failure"}, format="json")
    assert r.status_code == 404 and r.json()["fields"] == {"memory_ids": ["This user has no retrieval yet."]}


def test_a_private_agents_reply_judges_its_own_retrieval():
    shared, private, mid_shared, mid_private, private_rid, _ = _both_retrieved()
    signal = private.post(OBSERVE, FAILED, format="json").json()["evidence"]["outcome_signal"]
    assert signal["retrieval_id"] == private_rid and signal["memory_ids"] == [mid_private], signal
    assert _status(mid_private) == "deprecated" and _status(mid_shared) == "candidate"


def test_a_shared_agents_reply_judges_a_shared_retrieval_not_a_later_private_one():
    shared, private, mid_shared, mid_private, _, _ = _both_retrieved()
    private_rid = _retrieve(private)["retrieval_id"]
    signal = shared.post(OBSERVE, FAILED, format="json").json()["evidence"]["outcome_signal"]
    assert signal["retrieval_id"] != private_rid and signal["memory_ids"] == [mid_shared], signal
    assert _status(mid_shared) == "deprecated" and _status(mid_private) == "candidate"


def test_a_retrieval_id_of_another_owner_answers_like_an_unknown_one():
    shared, private, mid_shared, mid_private, private_rid, shared_rid = _both_retrieved()
    for client, rid in ((private, shared_rid), (shared, private_rid)):
        r = client.post(OBSERVE, {**FAILED, "meta": {"retrieval_id": rid}}, format="json")
        assert r.status_code == 404, r.content
        assert r.json()["fields"] == {"meta.retrieval_id": [f"Unknown retrieval id: {rid}."]}
    assert _status(mid_shared) == "candidate" and _status(mid_private) == "candidate"
    own = private.post(OBSERVE, {**FAILED, "meta": {"retrieval_id": private_rid}}, format="json")
    assert own.status_code == 200 and own.json()["evidence"]["outcome_signal"]["memory_ids"] == [mid_private]


# --- outcomes by id keep to the namespace named --------------------------------------------------


def test_an_outcome_by_id_changes_no_memory_outside_the_namespace_named(api):
    inside = make_memory(namespace="ops")
    outside = make_memory(content="Always tag the release commit before building the production images.")
    for ids, unknown in (([outside.pk], outside.pk), ([inside.pk, outside.pk], outside.pk)):
        body = {"user_id": "alice", "memory_ids": ids, "outcome": "failure", "namespace": "ops"}
        r = api.post(OUTCOME, body, format="json")
        assert r.status_code == 404, r.content
        assert r.json()["fields"] == {"memory_ids": [f"Unknown memory id(s): {unknown}."]}
    assert _status(inside.pk) == "candidate" and _status(outside.pk) == "candidate"
    body = {"user_id": "alice", "memory_ids": [inside.pk], "outcome": "failure", "namespace": "ops"}
    assert api.post(OUTCOME, body, format="json").status_code == 200
    assert _status(inside.pk) == "deprecated"


def test_an_outcome_by_id_without_a_namespace_changes_any_namespace_of_the_user(api):
    other = make_memory(namespace="ops")
    default = make_memory(content="Always tag the release commit before building the production images.")
    body = {"user_id": "alice", "memory_ids": [other.pk, default.pk], "outcome": "success"}
    r = api.post(OUTCOME, body, format="json")
    assert r.status_code == 200, r.content
    assert _status(other.pk) == "verified" and _status(default.pk) == "verified"


# --- a read-only retrieve stores no vector -------------------------------------------------------


def _items(body):
    return [(i["id"], i["score"]) for i in body["items"]]


def test_a_read_only_retrieve_ranks_unembedded_memories_without_storing_their_vectors(api):
    reader = make_client(["resolve"], name="reader")
    embedded = [make_memory(content=t, topic=f"logs {i}") for i, t in enumerate(LOG_LESSONS[:3])]
    memories_embed(memory_ids=[m.pk for m in embedded])
    missing = [make_memory(content=t, topic=f"logs {i}") for i, t in enumerate(LOG_LESSONS[3:6], start=3)]
    query = {"user_id": "alice", "query": "how are application logs rotated"}
    read = _retrieve(reader, query)
    assert read["retrieval_id"] is None and read["degraded"] is False
    assert {pk for pk, _ in _items(read)} & {m.pk for m in missing}  # the unembedded ones are ranked too
    assert not Memory.objects.filter(pk__in=[m.pk for m in missing], embedding__isnull=False).exists()
    assert not Memory.objects.filter(hits__gt=0).exists() and not MemoryRetrieval.objects.exists()
    filtered = _retrieve(reader, {**query, "filters": {"topic": "logs 4"}})
    assert [i["id"] for i in filtered["items"]] == [missing[1].pk]
    written = _retrieve(api, query)  # a key that may write stores them, and answers the same
    assert not Memory.objects.filter(embedding__isnull=True).exists()
    assert [pk for pk, _ in _items(written)] == [pk for pk, _ in _items(read)]
    assert [s for _, s in _items(written)] == pytest.approx([s for _, s in _items(read)], abs=1e-3)


def test_a_read_only_retrieve_with_a_worker_leaves_the_missing_vectors_to_it(
    api, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """With a broker, the vectors a read-only retrieve had to compute are handed to the embedding task (after the
    answer's transaction), so later read-only retrieves find them stored; the request itself stores none."""
    import memories.services.shared as shared

    sent = []
    monkeypatch.setattr(shared, "task_send", lambda name, *args, **kwargs: sent.append((name, *args)))
    settings.CELERY_TASK_ALWAYS_EAGER = False
    reader = make_client(["resolve"], name="reader")
    missing = [make_memory(content=t, topic=f"logs {i}") for i, t in enumerate(LOG_LESSONS[:3])]
    with django_capture_on_commit_callbacks(execute=True):
        read = _retrieve(reader, {"user_id": "alice", "query": "how are application logs rotated"})
    assert read["items"] and read["retrieval_id"] is None
    assert [(name, sorted(ids)) for name, ids in sent] == [("memories.tasks.memory_embed", sorted(m.pk for m in missing))]
    assert not Memory.objects.filter(embedding__isnull=False).exists()
    memories_embed(memory_ids=sent[0][1])  # what the worker runs
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _retrieve(reader, {"user_id": "alice", "query": "how are application logs rotated"})
    assert sent == []  # nothing left to compute


def test_a_read_only_retrieve_after_a_model_change_keeps_the_old_vectors(api):
    reader = make_client(["resolve"], name="reader")
    rows = [make_memory(content=t, topic=f"logs {i}") for i, t in enumerate(LOG_LESSONS[:3])]
    memories_embed(memory_ids=[m.pk for m in rows])
    Memory.objects.update(embedding_model="an-older-model")
    read = _retrieve(reader, {"user_id": "alice", "query": "how are application logs rotated"})
    assert read["degraded"] is False and read["items"], read
    assert set(Memory.objects.values_list("embedding_model", flat=True)) == {"an-older-model"}
    written = _retrieve(api, {"user_id": "alice", "query": "how are application logs rotated"})
    assert [i["id"] for i in written["items"]] == [i["id"] for i in read["items"]]
    assert "an-older-model" not in set(Memory.objects.values_list("embedding_model", flat=True))


def test_an_agent_switched_to_shared_hands_its_memories_to_the_shared_agents():
    from io import StringIO

    from django.core.management import CommandError, call_command

    from agents.authentication import verified_keys_forget

    shared, private = _shared_and_private()
    same = "Always run the database migrations before deploying the web application."
    mine = make_memory(content="Rotate the staging credentials with the vault command.", private_agent=private.agent)
    twin = make_memory(content=same, private_agent=private.agent)
    theirs = make_memory(content=same)  # a live shared copy of the same text: the agent's copy stays its own
    _retrieve(private)
    with pytest.raises(CommandError, match="switch private_user_data off first"):
        call_command("share_private_memories", "--agent", private.agent.name)
    private.agent.private_user_data = False
    private.agent.save()
    verified_keys_forget()
    out = StringIO()
    call_command("share_private_memories", "--agent", private.agent.name, stdout=out)
    assert "1 of its memories are shared, 1 kept" in out.getvalue() and f"kept: #{twin.pk} of user alice" in out.getvalue()
    assert Memory.objects.get(pk=mine.pk).private_agent_id is None
    assert Memory.objects.get(pk=twin.pk).private_agent_id == private.agent.pk
    assert Memory.objects.get(pk=theirs.pk).private_agent_id is None
    assert not MemoryRetrieval.objects.filter(private_agent=private.agent).exists()
    assert Memory.objects.get(pk=mine.pk).history.first().history_change_reason.startswith("shared")
    # what it stored while private is read by the shared agents now, and by itself
    assert mine.pk in {i["id"] for i in _retrieve(shared, {"user_id": "alice", "query": "rotate staging credentials"})["items"]}


def test_memories_are_not_shared_until_the_switch_has_reached_every_process(settings):
    from common.api import Conflict
    from memories.services.owners import private_memories_share

    _, private = _shared_and_private()
    mine = make_memory(content="Rotate the staging credentials with the vault command.", private_agent=private.agent)
    settings.API_KEY_CACHE_S = 60
    private.agent.private_user_data = False
    private.agent.save()
    with pytest.raises(Conflict) as refused:
        private_memories_share(agent=private.agent)
    assert refused.value.code == "switch_settling" and refused.value.extra["retry_after_s"] > 55
    assert Memory.objects.get(pk=mine.pk).private_agent_id == private.agent.pk
