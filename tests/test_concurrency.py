"""Fifty concurrent writers, each on its own database connection, on one object of each kind.

Counts come out exact, each request is answered once, nothing deadlocks, and no
unique-constraint race surfaces as an error.
"""

import threading
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from actions.models import Action
from agents.models import Agent
from autonomy.services import autonomy_evaluate, autonomy_transition_approve
from common.api import ApplicationError
from feedback.models import MistakePattern
from feedback.services.mistakes import mistake_patterns_detect
from learning.models import DisambiguationRequest, LearnedPhrase, LearningCandidate, LearningSignal
from learning.services.candidates import candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from tests.conftest import CBU_VERBS, fill_history, make_client, reject_n, reviewer_user

pytestmark = pytest.mark.django_db(transaction=True)
WRITERS = 50


def run_concurrently(fn, n=WRITERS):
    """Run fn(i) in n threads released together; answer (results, errors, seconds)."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as exc:  # reported by the caller's assertions
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors, time.monotonic() - started


def test_fifty_writers_on_one_learned_phrase(db):
    verb_catalogue_load(entries=CBU_VERBS)
    from learning.models import Verb

    verbs = list(Verb.objects.order_by("name"))
    _, errors, seconds = run_concurrently(
        lambda i: learned_phrase_upsert(phrase="Show me my units", verb=verbs[i % len(verbs)], user_id="alice")
    )
    assert errors == []
    assert LearnedPhrase.objects.filter(normalized="show me my units", user_id="alice").count() == 1
    assert seconds < 30


def test_fifty_writers_on_one_candidate(db):
    verb_catalogue_load(entries=CBU_VERBS)
    _, errors, _ = run_concurrently(
        lambda i: candidate_record(
            input_pattern="units please", suggested_output="cbu.list", user_id=None, source="test", confidence=0.1
        )
    )
    assert errors == []
    (row,) = LearningCandidate.objects.filter(normalized="units please", suggested_output="cbu.list")
    assert row.occurrence_count == WRITERS
    assert abs(row.confidence - (1 - 0.9**WRITERS)) < 1e-6


def test_fifty_answers_to_one_disambiguation_request(db):
    verb_catalogue_load(entries=CBU_VERBS)
    agent = make_client(["resolve", "feedback"], name="agent-a")
    body = agent.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    assert body["outcome"] == "ambiguous"
    auth = agent._credentials["HTTP_AUTHORIZATION"]
    verbs = [o["verb"] for o in body["options"]]

    def answer(i):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=auth)
        return client.post(
            f"/api/v1/disambiguations/{body['request_id']}/select", {"selected_verb": verbs[i % len(verbs)]}, format="json"
        ).status_code

    codes, errors, _ = run_concurrently(answer)
    assert errors == []
    assert sorted(codes) == [200] + [409] * (WRITERS - 1)
    row = DisambiguationRequest.objects.get(request_id=body["request_id"])
    assert row.status == "selected"
    assert LearningSignal.objects.filter(request=row, outcome="selected_alt").count() == 1


def test_fifty_concurrent_detection_runs_on_one_pattern(db):
    agent = Agent.objects.create(name="ops")
    reject_n(agent, 4)
    _, errors, _ = run_concurrently(lambda i: mistake_patterns_detect(agent_id=agent.pk if i % 2 else None))
    assert errors == []
    (pattern,) = MistakePattern.objects.all()
    assert pattern.occurrence_count == 4
    assert pattern.records.count() == 4


def test_fifty_approvals_of_one_transition_apply_once(db):
    agent = Agent.objects.create(name="ops")
    send = Action.objects.create(name="email.send", autonomy_level=1)
    fill_history(send, agent, completed=25)
    (transition,) = autonomy_evaluate()["proposed"]
    reviewers = [reviewer_user(f"rev{i}", "approve_autonomytransition") for i in range(WRITERS)]

    def approve(i):
        try:
            autonomy_transition_approve(transition=transition.pk, user=reviewers[i])
            return "applied"
        except ApplicationError as exc:
            return exc.code

    outcomes, errors, _ = run_concurrently(approve)
    assert errors == []
    assert outcomes.count("applied") == 1
    assert len(outcomes) == WRITERS
    send.refresh_from_db()
    assert send.autonomy_level == 2


def test_a_correction_and_a_clicks_learning_of_its_anchor_run_one_after_the_other(settings, monkeypatch):
    """A correction decays the user's anchors (phrases of other texts) and overrules evidence near its text; a click's
    learning writes evidence, then locks the phrase it promotes. Each waits at the point the other reaches: they
    must run one after the other (the correction takes its anchors' texts' locks), not deadlock (a 503 to retry)."""
    import uuid

    from embeddings.services import embeddings_compute
    from learning.models import Verb
    from learning.services import corrections, disambiguations
    from learning.services.evidence import phrase_evidence_add
    from tests.conftest import CBU_CATALOGUE

    settings.RESOLUTION_OVERRIDES = {
        **settings.RESOLUTION_OVERRIDES,
        "correction_decay_threshold": 0.3,
        "decide_similarity": 0.3,
        "evidence_similarity": 0.3,
    }
    verb_catalogue_load(entries=CBU_CATALOGUE)
    learned_phrase_upsert(phrase="list all cbus", verb=Verb.objects.get(name="cbu.list"), user_id="alice", confidence=0.5)
    vectors, model = embeddings_compute(texts=["list all cbus"])
    phrase_evidence_add(user_id="alice", phrase="list all cbus", verb="cbu.show", negative=0.5, vector=vectors[0], model=model)
    options = [
        {"verb": "cbu.list", "display_name": "List", "example": "", "score": 0.7},
        {"verb": "cbu.show", "display_name": "Show", "example": "", "score": 0.69},
    ]
    row = DisambiguationRequest.objects.create(
        request_id=uuid.uuid4(), user_id="alice", text="list all cbus", normalized="list all cbus", options=options
    )
    monkeypatch.setattr(disambiguations, "_signals_enqueue", lambda pk: None)
    disambiguations.disambiguation_select(request_id=row.request_id, selected_verb="cbu.list", agent_id=None)

    evidence_written, anchors_locked = threading.Event(), threading.Event()
    record, lock_or_create = disambiguations.candidate_record, corrections.learned_phrase_lock_or_create

    def record_late(**kw):  # the click's learning wrote its evidence: give the correction time to lock its anchors
        evidence_written.set()
        anchors_locked.wait(2)
        return record(**kw)

    def lock_late(**kw):  # the correction locked its anchors: give the click's learning time to reach them
        anchors_locked.set()
        evidence_written.wait(2)
        return lock_or_create(**kw)

    monkeypatch.setattr(disambiguations, "candidate_record", record_late)
    monkeypatch.setattr(corrections, "learned_phrase_lock_or_create", lock_late)
    steps = [
        lambda: disambiguations.disambiguation_signals_process(request_pk=row.pk),
        lambda: corrections.phrase_correction_apply(
            text="list every cbu", wrong_verb="cbu.list", correct_verb="cbu.show", user_id="alice"
        ),
    ]
    _, errors, seconds = run_concurrently(lambda i: steps[i](), n=2)
    assert errors == [] and seconds < 60, (errors, seconds)
    assert LearningSignal.objects.filter(request=row).exclude(processed_at=None).exists()
