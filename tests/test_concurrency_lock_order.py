"""Writers of the same rows at once, in real threads: each takes its locks in the one order the others take them
(a user's learning lock, then a text's; a user's memory scopes, then the rows in key order; a review item's lock,
then its claim and the item), so none is killed as a deadlock (503 to the API, 500 to the admin), and the counters
and one-winner decisions lose nothing. One writer is held at its first lock while the other runs into it."""

import threading
import time
from unittest import mock

import pytest
from django.db import connection

from learning.models import LearnedPhrase
from learning.resolution import resolve as pipeline
from learning.services import corrections as corr_mod
from learning.services import disambiguations as dis_mod
from learning.services.catalogue import verb_catalogue_load
from learning.services.corrections import phrase_confirmation_apply
from learning.services.disambiguations import disambiguation_record, disambiguation_select, disambiguation_signals_process
from tests.conftest import CBU_CATALOGUE
from tests.test_races_between_writers import _start

pytestmark = pytest.mark.django_db(transaction=True)

HOLD_S = 3


def _two(fa, fb):
    raw = {}
    threads = [_start(raw, "a", fa), _start(raw, "b", fb)]
    for thread in threads:
        thread.join(60)
    return raw


def _after(real, both: threading.Barrier, late: float = 0.0):
    """``real`` runs first, then the caller waits for the other writer to reach its own pause."""

    def run(*a, **kw):
        result = real(*a, **kw)
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass
        time.sleep(late)
        return result

    return run


def _errors(out):
    return {k: v for k, v in out.items() if isinstance(v, Exception)}


# --- a confirmation and a click's learning (automatic promotion) of the same user's text ---------------------


def test_a_confirmation_and_a_clicks_automatic_promotion_of_the_same_text_at_once(monkeypatch):
    """The click's learning writes the user's evidence row for (text, verb) and then promotes the phrase (locks the
    user's learned phrase); the confirmation locks (or inserts) the phrase and then writes that same evidence row.
    Opposite orders: a deadlock, one side answered 503 / a failed learning task."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    row = disambiguation_record(resolution=pipeline(text="list all cbus", user_id="dave"))
    assert row is not None, "the text must resolve as ambiguous"
    with mock.patch("learning.services.disambiguations._signals_enqueue"):
        disambiguation_select(request_id=row.request_id, selected_verb="cbu.list", agent_id=None)
    both = threading.Barrier(2, timeout=HOLD_S)
    # the click's learning pauses after its evidence upsert; the confirmation after locking/creating the phrase row
    monkeypatch.setattr(dis_mod, "phrase_evidence_add_many", _after(dis_mod.phrase_evidence_add_many, both))
    monkeypatch.setattr(corr_mod, "learned_phrase_lock_or_create", _after(corr_mod.learned_phrase_lock_or_create, both))
    out = _two(
        lambda: disambiguation_signals_process(request_pk=row.pk),
        lambda: phrase_confirmation_apply(text="list all cbus", verb="cbu.list", user_id="dave"),
    )
    assert _errors(out) == {}, out
    assert list(LearnedPhrase.objects.filter(user_id="dave").values_list("normalized", "verb__name")) == [
        ("list all cbus", "cbu.list")
    ]


# --- an observation that repeats a memory (and reports an outcome) and an outcome on the same memories ----------


def _api_client(name="assistant"):
    from tests.conftest import make_client

    return make_client(["resolve", "feedback"], name=name)


def _fresh(client):
    from rest_framework.test import APIClient

    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=client._credentials["HTTP_AUTHORIZATION"])
    return other


def test_a_retrieval_and_an_outcome_of_the_same_memories_at_once(settings):
    """POST /memories/outcome locks the memories in key order (the older, then the newer); POST /memories/retrieve
    bumps their hits in one UPDATE, which locks them in the order the table stores them (the newer first once the
    older was updated). A third writer holding the older for a moment lines them up: the outcome waits for the older
    holding nothing, the retrieval takes the newer and waits for the older; when the older is free the outcome takes
    it and wants the newer: a deadlock, one of them answered 503."""
    from django.db import transaction

    from memories.models import Memory
    from tests.conftest import LOG_LESSONS, seed_memories

    settings.MEMORY_RETRIEVE_MIN_SCORE = -1.0
    settings.MEMORY_AUTO_PROMOTE_STREAK = settings.MEMORY_AUTO_PROMOTE_HITS = 100
    client, other_client = _api_client(), _api_client("other-assistant")
    older, newer = seed_memories(user="alice", texts=LOG_LESSONS[:2])
    Memory.objects.filter(pk=older.pk).update(topic="logs again")  # the older memory's row now sits after the newer's
    holding, out = threading.Event(), {}

    def holder():
        with transaction.atomic():
            list(Memory.objects.select_for_update().filter(pk=older.pk))
            holding.set()
            time.sleep(4.0)

    def outcome():
        holding.wait(10)
        body = {"user_id": "alice", "memory_ids": [older.pk, newer.pk], "outcome": "success"}
        return _fresh(client).post("/api/v1/memories/outcome", body, format="json")

    def retrieve():
        holding.wait(10)
        time.sleep(1.0)  # the outcome is queued on the older memory first
        # The plan PostgreSQL takes for ``id IN (...)`` on a table of a few pages (a seq scan), or of many (a bitmap
        # heap scan), visits rows in table order; pinned on this connection so the test does not depend on the
        # table's statistics (an index scan on the key would visit them in key order).
        with connection.cursor() as cur:
            cur.execute("SET enable_indexscan = off")
            cur.execute("SET enable_bitmapscan = off")
        # another agent's key: a second request of the same key may queue behind the first one's update of the key's
        # last_used_at (agents/authentication.py), which would hide the race
        return _fresh(other_client).post(
            "/api/v1/memories/retrieve", {"user_id": "alice", "query": "log rotation"}, format="json"
        )

    threads = [_start(out, "holder", holder), _start(out, "outcome", outcome), _start(out, "retrieve", retrieve)]
    for t in threads:
        t.join(60)
    assert _errors(out) == {}, out
    codes = {k: (out[k].status_code, out[k].json().get("code")) for k in ("outcome", "retrieve")}
    assert codes == {"outcome": (200, None), "retrieve": (200, None)}, codes


@pytest.mark.parametrize("other_call", ["outcome", "retrieve"])
def test_an_observe_repeating_a_memory_with_an_outcome_and_another_writer_of_the_same_memories_at_once(
    monkeypatch, settings, other_call
):
    """POST /memories/observe runs in one transaction: its dedupe locks the memory it skips into (the newer), then
    its outcome signal (validation_passed) locks the retrieval's memories in key order (the older, then the newer).
    POST /memories/outcome on the same memories locks the older, then the newer; POST /memories/retrieve bumps their
    hits in one UPDATE (the older, then the newer).
    Each takes the user's memory scope first now: no crossed row locks, no 503."""
    import memories.services.store as store
    from memories.models import MemoryRetrieval
    from tests.conftest import LOG_LESSONS, seed_memories

    settings.MEMORY_RETRIEVE_MIN_SCORE = -1.0
    settings.MEMORY_AUTO_PROMOTE_STREAK = settings.MEMORY_AUTO_PROMOTE_HITS = 100
    client, other_client = _api_client(), _api_client("other-assistant")
    older, newer = seed_memories(user="alice", texts=LOG_LESSONS[:2])
    retrieval = MemoryRetrieval.objects.create(user_id="alice", query_sha256="x" * 64, memory_ids=[older.pk, newer.pk])
    locked = threading.Event()
    real = store._decision_record

    def record_then_hold(**kw):  # the observe holds the newer memory (locked by its dedupe) here
        real(**kw)
        locked.set()
        time.sleep(1.5)

    monkeypatch.setattr(store, "_decision_record", record_then_hold)
    observe = {
        "user_id": "alice",
        "user_message": "remember this",
        "assistant_message": LOG_LESSONS[1],
        "meta": {"type": "pattern", "validation_passed": True, "retrieval_id": retrieval.pk},
    }
    path, body = {
        "outcome": ("/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": [older.pk, newer.pk], "outcome": "success"}),
        "retrieve": ("/api/v1/memories/retrieve", {"user_id": "alice", "query": "log rotation"}),
    }[other_call]

    def other():
        assert locked.wait(20)
        return _fresh(other_client).post(path, body, format="json")

    out = _two(lambda: _fresh(client).post("/api/v1/memories/observe", observe, format="json"), other)
    assert _errors(out) == {}, out
    codes = {k: (v.status_code, v.json().get("code")) for k, v in out.items()}
    assert codes == {"a": (200, None), "b": (200, None)}, codes


# --- brute-force probes: many writers released together -------------------------------------------------------


def _clients(client, n):
    return [_fresh(client) for _ in range(n)]


def test_concurrent_proposals_of_a_new_action_all_succeed():
    from actions.models import Action
    from feedback.models import Proposal
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    client = make_client(["feedback"], name="ops")
    clients = _clients(client, 12)
    body = {"action": "crm.update", "proposed_action": {"id": 1}, "reasoning": {"confidence": 0.5}}
    codes, errors, _ = run_concurrently(lambda i: clients[i].post("/api/v1/proposals", body, format="json").status_code, n=12)
    assert errors == [] and codes == [201] * 12, codes
    assert Action.objects.filter(name="crm.update").count() == 1 and Proposal.objects.count() == 12


def test_concurrent_outcomes_of_one_proposal_are_recorded_once():
    from feedback.models import FeedbackRecord
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    agent = make_client(["feedback"], name="ops")
    governance = make_client(["governance"], name="gov")
    body = {"action": "email.send", "proposed_action": {"to": "cfo@example.com"}, "reasoning": {"confidence": 0.5}}
    proposal = agent.post("/api/v1/proposals", body, format="json").json()
    assert governance.post(f"/api/v1/proposals/{proposal['id']}/approve", {}, format="json").status_code == 200
    clients = _clients(agent, 8)
    outcomes = [{"proposal": proposal["id"], "success": bool(i % 2), "error": "" if i % 2 else "failed"} for i in range(8)]
    codes, errors, _ = run_concurrently(
        lambda i: clients[i].post("/api/v1/outcomes", outcomes[i], format="json").status_code, n=8
    )
    assert errors == [] and sorted(codes) == [200] + [409] * 7, codes
    assert FeedbackRecord.objects.filter(proposal_id=proposal["id"]).count() <= 1


def test_concurrent_confirmations_of_one_text_count_each():
    from learning.models import PhraseEvidence
    from tests.conftest import CATALOGUE, make_client
    from tests.test_concurrency import run_concurrently

    verb_catalogue_load(entries=CATALOGUE)
    client = make_client(["resolve", "feedback"])
    clients = _clients(client, 12)
    body = {"text": "give me my units", "verb": "cbu.list", "user_id": "alice"}
    answers, errors, _ = run_concurrently(lambda i: clients[i].post("/api/v1/resolutions/confirm", body, format="json"), n=12)
    assert errors == [], errors
    assert sorted(a.status_code for a in answers) == [200] * 12, [(a.status_code, a.json()) for a in answers]
    assert LearnedPhrase.objects.get(normalized="give me my units", user_id="alice").occurrence_count == 12
    assert PhraseEvidence.objects.get(normalized="give me my units", user_id="alice").signal_count == 12


def test_concurrent_proposal_decisions_one_wins():
    from agents.models import Agent
    from feedback.models import FeedbackRecord
    from review.models import Decision
    from tests.conftest import make_client, make_proposal
    from tests.test_concurrency import run_concurrently

    proposer = Agent.objects.create(name="proposer")
    p = make_proposal(proposer)
    gov = make_client(["governance"], name="gov")
    clients = _clients(gov, 9)
    paths = ["approve", "reject", "modify"]
    bodies = [{}, {"review_notes": "no"}, {"modified_action": {"to": "cfo@example.com"}}]
    answers, errors, _ = run_concurrently(
        lambda i: clients[i].post(f"/api/v1/proposals/{p.pk}/{paths[i % 3]}", bodies[i % 3], format="json"), n=9
    )
    assert errors == []
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [409] * 8, [(a.status_code, a.json()) for a in answers]
    p.refresh_from_db()
    assert Decision.objects.filter(object_id=p.pk).count() == 1
    assert FeedbackRecord.objects.filter(proposal=p).count() == (0 if p.status == "approved" else 1)


def test_concurrent_select_and_abandon_one_wins():
    from learning.models import AbandonEvent, DisambiguationRequest
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    verb_catalogue_load(entries=CBU_CATALOGUE)
    agent = make_client(["resolve", "feedback"], name="agent-a")
    body = agent.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    assert body["outcome"] == "ambiguous"
    clients = _clients(agent, 10)
    rid = body["request_id"]

    def answer(i):
        if i % 2:
            return clients[i].post(f"/api/v1/disambiguations/{rid}/abandon", {"reason": "timeout"}, format="json").status_code
        return (
            clients[i]
            .post(f"/api/v1/disambiguations/{rid}/select", {"selected_verb": body["options"][0]["verb"]}, format="json")
            .status_code
        )

    codes, errors, _ = run_concurrently(answer, n=10)
    assert errors == [] and sorted(codes) == [200] + [409] * 9, codes
    row = DisambiguationRequest.objects.get(request_id=rid)
    assert AbandonEvent.objects.filter(request=row).count() == (1 if row.status == "abandoned" else 0)


def test_concurrent_candidate_decisions_one_wins():
    from learning.models import LearningCandidate
    from learning.services.candidates import candidate_record
    from review.models import Decision
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    verb_catalogue_load(entries=CBU_CATALOGUE)
    cand = candidate_record(input_pattern="units please", suggested_output="cbu.list", user_id=None, source="t", confidence=0.5)
    gov = make_client(["governance"], name="gov")
    clients = _clients(gov, 8)

    def decide(i):
        if i % 2:
            return clients[i].post(f"/api/v1/learning/candidates/{cand.pk}/reject", {"reason": "no"}, format="json")
        return clients[i].post(f"/api/v1/learning/candidates/{cand.pk}/approve", {}, format="json")

    answers, errors, _ = run_concurrently(decide, n=8)
    assert errors == []
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7, [(a.status_code, a.json()) for a in answers]
    assert Decision.objects.filter(object_id=cand.pk).count() == 1
    assert LearningCandidate.objects.get(pk=cand.pk).status in ("applied", "rejected")


def test_concurrent_execution_reviews_one_wins():
    from actions.models import Action
    from agents.models import Agent
    from feedback.models import Execution, FeedbackRecord
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    runner = Agent.objects.create(name="runner")
    action = Action.objects.create(name="email.send", autonomy_level=2)
    e = Execution.objects.create(agent=runner, action=action, confidence=0.9, success=True, params={"to": "a"})
    gov = make_client(["governance"], name="gov")
    clients = _clients(gov, 8)
    answers, errors, _ = run_concurrently(
        lambda i: clients[i].post(
            f"/api/v1/executions/{e.pk}/review", {"outcome": "correct" if i % 2 else "incorrect"}, format="json"
        ),
        n=8,
    )
    assert errors == []
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7, [(a.status_code, a.json()) for a in answers]
    assert FeedbackRecord.objects.filter(execution=e).count() == 1


def test_concurrent_block_expire_and_delete():
    from learning.services.blocks import phrase_block_add
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    verb_catalogue_load(entries=CBU_CATALOGUE)
    block, _ = phrase_block_add(phrase="wipe units", verb_name="cbu.delete")
    gov = make_client(["governance"], name="gov")
    clients = _clients(gov, 8)

    def go(i):
        if i % 2:
            return clients[i].delete(f"/api/v1/blocklist/{block.pk}").status_code
        return clients[i].post(f"/api/v1/blocklist/{block.pk}/expire").status_code

    codes, errors, _ = run_concurrently(go, n=8)
    assert errors == [] and set(codes) <= {200, 204, 404}, codes
    assert codes.count(204) == 1, codes


# --- the per-key request limit under concurrent requests ---------------------------------------------------------


def test_concurrent_requests_of_one_key_never_exceed_its_rate(settings, monkeypatch):
    """ApiKeyRateThrottle is DRF's SimpleRateThrottle: cache.get(history) ... cache.set(history) with no atomic step,
    so requests arriving together each read the same history and each is let through (lost increments)."""
    from django.core.cache import cache

    from agents.authentication import ApiKeyRateThrottle
    from tests.conftest import make_client
    from tests.test_concurrency import run_concurrently

    class SlowCache:  # a shared cache (Redis behind CACHE_URL) answers after a network round trip
        def __getattr__(self, name):
            return getattr(cache, name)

        def get(self, *a, **kw):
            value = cache.get(*a, **kw)
            time.sleep(0.05)
            return value

    monkeypatch.setattr(ApiKeyRateThrottle, "cache", SlowCache())
    monkeypatch.setattr(ApiKeyRateThrottle, "timer", lambda self: 1_000_000.0)  # one window, whatever the clock says
    settings.API_KEY_RATE = "5/min"
    client = make_client(["resolve"], name="busy")
    # a key used a moment ago: no request updates its last_used_at (which would queue them one behind the other)
    from django.utils import timezone

    from agents.models import ApiKey

    ApiKey.objects.filter(pk=client.key.pk).update(last_used_at=timezone.now())
    clients = _clients(client, 30)
    codes, errors, _ = run_concurrently(lambda i: clients[i].get("/api/v1/actions").status_code, n=30)
    assert errors == []
    assert codes.count(200) == 5 and codes.count(429) == 25, sorted(codes)


# --- an erasure of a user while a reviewer decides, in the inbox, a candidate of theirs they hold ---------------


def test_an_inbox_decision_on_a_held_candidate_and_the_erasure_of_its_user_at_once(monkeypatch):
    """item_decide locks the item's claim row, then (through candidate_approve) the candidate row. user_data_erase
    locks the user's candidates first, and at its end deletes the claims on them
    (review.services.decisions_of_erased_user_scrub). Opposite orders: a deadlock."""
    import learning.services.users as users_mod
    from learning.models import LearningCandidate
    from learning.services.candidates import candidate_record
    from privacy.services import user_data_erase
    from review import selectors as review_selectors
    from review.models import Kind
    from review.services import claim_take, item_decide
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default
    from tests.conftest import reviewer_user

    verb_catalogue_load(entries=CBU_CATALOGUE)
    cand = candidate_record(
        input_pattern="wipe my units", suggested_output="cbu.list", user_id="alice", source="click", confidence=0.5
    )
    reviewer = reviewer_user("rev", superuser=True)
    claim_take(kind=Kind.CANDIDATE, object_id=cand.pk, tenant_id=cand.tenant_id, user=reviewer)  # the reviewer opened it
    claim_locked, erasure_locked = threading.Event(), threading.Event()
    real_get, real_only_of = review_selectors.item_get, users_mod._global_candidates_only_of
    calls = []

    def item_get_then_wait(**kw):  # item_decide holds the claim row here
        obj = real_get(**kw)
        claim_locked.set()
        erasure_locked.wait(5)
        return obj

    def only_of(user_id):  # called again once the erasure has locked the user's candidates and phrases
        calls.append(user_id)
        if len(calls) == 2:
            erasure_locked.set()
        return real_only_of(user_id)

    monkeypatch.setattr(review_selectors, "item_get", item_get_then_wait)
    monkeypatch.setattr(users_mod, "_global_candidates_only_of", only_of)
    tenant = tenant_default().pk

    def erase():
        assert claim_locked.wait(20)
        with tenant_scope([tenant]):
            return user_data_erase(user_id="alice")

    out = _two(
        lambda: item_decide(
            kind=Kind.CANDIDATE, object_id=cand.pk, user=reviewer, verdict="approve", confirmed=True, acknowledged=True
        ),
        erase,
    )
    errors = {k: v for k, v in _errors(out).items() if getattr(v, "code", None) not in ("decided",)}
    assert errors == {} or all(type(v).__name__ == "NotFound" for v in errors.values()), out
    assert not LearningCandidate.objects.filter(user_id="alice").exists()


def test_requests_of_one_key_never_queue_behind_each_other_for_its_last_use(monkeypatch, settings):
    """The first request of a key in a minute stamps its ``last_used_at`` inside its own transaction; another request
    of the key meanwhile (in another process: no key remembered here) skips the stamp instead of waiting for that row
    until the first request ends."""
    settings.API_KEY_CACHE_S = 0
    import learning.api as learning_api
    from agents.models import ApiKey
    from learning.services.catalogue import verb_catalogue_load

    verb_catalogue_load(entries=CBU_CATALOGUE)
    client = _api_client()
    ApiKey.objects.filter(pk=client.key.pk).update(last_used_at=None)
    inside, release = threading.Event(), threading.Event()
    real = learning_api.resolve
    first = []

    def resolve_held(**kw):
        if not first:
            first.append(True)
            inside.set()
            release.wait(20)  # the first request stays in its view, its transaction open
        return real(**kw)

    monkeypatch.setattr(learning_api, "resolve", resolve_held)
    raw = {}
    slow = _start(raw, "first", lambda: _fresh(client).post("/api/v1/resolve", {"text": "list my units"}, format="json"))
    assert inside.wait(20)
    quick = _start(raw, "second", lambda: _fresh(client).get("/api/v1/actions"))
    quick.join(10)
    finished_while_held = not quick.is_alive()
    release.set()
    slow.join(30)
    quick.join(30)
    assert finished_while_held
    assert raw["second"].status_code == 200 and raw["first"].status_code == 200, raw
    assert ApiKey.objects.get(pk=client.key.pk).last_used_at is not None


def test_a_retrieval_that_stores_missing_vectors_and_an_outcome_of_those_memories_at_once(monkeypatch, settings):
    """A retrieval stores the vectors of the user's memories that have none (their rows locked), then bumps hits;
    an outcome of those memories takes the user's scope, then the rows. The retrieval takes the scope before it
    stores a vector: the outcome waits for it instead of holding the scope while the retrieval waits for it."""
    import memories.services.retrieval as retrieval
    from memories.models import Memory
    from tests.conftest import LOG_LESSONS, seed_memories

    settings.MEMORY_RETRIEVE_MIN_SCORE = -1.0
    settings.MEMORY_AUTO_PROMOTE_STREAK = settings.MEMORY_AUTO_PROMOTE_HITS = 100
    client, other_client = _api_client(), _api_client("other-assistant")
    older, newer = seed_memories(user="alice", texts=LOG_LESSONS[:2])
    Memory.objects.filter(pk__in=[older.pk, newer.pk]).update(embedding=None)  # written while the embedder was down
    stored, real = threading.Event(), retrieval._lazy_embed

    def embed_then_pause(**kw):
        answer = real(**kw)
        stored.set()
        time.sleep(1.5)  # the outcome arrives while the retrieval holds the rows it stored vectors in
        return answer

    monkeypatch.setattr(retrieval, "_lazy_embed", embed_then_pause)

    def outcome():
        assert stored.wait(20)
        body = {"user_id": "alice", "memory_ids": [older.pk, newer.pk], "outcome": "success"}
        return _fresh(other_client).post("/api/v1/memories/outcome", body, format="json")

    out = _two(
        lambda: _fresh(client).post("/api/v1/memories/retrieve", {"user_id": "alice", "query": "log rotation"}, format="json"),
        outcome,
    )
    assert _errors(out) == {}, out
    codes = {k: (v.status_code, v.json().get("code")) for k, v in out.items()}
    assert codes == {"a": (200, None), "b": (200, None)}, codes
    assert Memory.objects.filter(pk__in=[older.pk, newer.pk], embedding__isnull=False).count() == 2
