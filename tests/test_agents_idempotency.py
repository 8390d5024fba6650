"""Writes sent with an Idempotency-Key are applied once: a retry gets the stored answer."""

import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone
from rest_framework.parsers import MultiPartParser

from agents.models import IdempotentRequest
from agents.services import idempotent_requests_purge
from learning.models import LearnedPhrase, PhraseEvidence
from tests.conftest import make_client, make_memory, reviewer_client, reviewer_user

CONFIRM = "/api/v1/resolutions/confirm"
BODY = {"text": "show me every client business unit", "verb": "cbu.list", "user_id": "alice"}


def post(client, url, body, key):
    return client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_retried_confirmation_counts_once_and_gets_the_same_answer(api, catalogue):
    first = post(api, CONFIRM, BODY, "confirm-1")
    assert first.status_code == 200 and "Idempotent-Replayed" not in first
    again = post(api, CONFIRM, BODY, "confirm-1")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    row = LearnedPhrase.objects.get(normalized=BODY["text"], user_id="alice")
    assert row.occurrence_count == 1
    assert PhraseEvidence.objects.get(user_id="alice", verb="cbu.list").signal_count == 1
    # A new key is a new confirmation.
    third = post(api, CONFIRM, BODY, "confirm-2")
    assert third.status_code == 200 and third.json()["phrase"]["occurrence_count"] == 2
    # Without a key nothing is stored and every request counts.
    assert api.post(CONFIRM, BODY, format="json").json()["phrase"]["occurrence_count"] == 3
    assert IdempotentRequest.objects.count() == 2


def test_the_key_on_another_request_is_refused_and_changes_nothing(api, catalogue):
    assert post(api, CONFIRM, BODY, "k").status_code == 200
    r = post(api, CONFIRM, {**BODY, "text": "list the units"}, "k")
    assert r.status_code == 409
    assert r.json()["code"] == "idempotency_key_reused" and "Idempotency-Key" in r.json()["fields"]
    assert not LearnedPhrase.objects.filter(normalized="list the units").exists()


def test_a_failed_request_stores_nothing_so_its_retry_runs(api, catalogue):
    bad = post(api, CONFIRM, {**BODY, "verb": "cbu.nope"}, "k")
    assert bad.status_code == 400
    assert not IdempotentRequest.objects.exists()
    # The same key now carries the corrected request (the first one was never applied).
    assert post(api, CONFIRM, BODY, "k").status_code == 200
    assert IdempotentRequest.objects.get().status_code == 200


def test_keys_belong_to_their_agent(api, catalogue):
    other = make_client(api.key.scopes, name="agent-b")
    assert post(api, CONFIRM, BODY, "same").status_code == 200
    r = post(other, CONFIRM, BODY, "same")
    assert r.status_code == 200 and "Idempotent-Replayed" not in r
    assert r.json()["phrase"]["occurrence_count"] == 2


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve", "tab\there"])
def test_a_malformed_key_is_a_400_naming_the_header(api, catalogue, key):
    r = post(api, CONFIRM, BODY, key)
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["fields"]
    assert not LearnedPhrase.objects.exists()


def test_a_reviewer_token_cannot_send_a_key(db, catalogue):
    client = reviewer_client(reviewer_user("rita", "approve_autonomytransition"))
    r = client.post("/api/v1/autonomy/transitions/1/approve", {}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["fields"]


def test_reads_ignore_the_key(api, catalogue):
    r = api.get("/api/v1/learning/candidates", HTTP_IDEMPOTENCY_KEY="")
    assert r.status_code in (200, 403)
    assert not IdempotentRequest.objects.exists()


def test_a_memory_outcome_sent_twice_with_a_key_is_applied_once(api):
    memory = make_memory()
    body = {"user_id": "alice", "memory_ids": [memory.pk], "outcome": "success"}
    first = post(api, "/api/v1/memories/outcome", body, "out-1")
    assert first.status_code == 200, first.json()
    assert first.json()["memories"][0]["status"] == "verified"
    versions = memory.history.count()
    again = post(api, "/api/v1/memories/outcome", body, "out-1")
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert memory.history.count() == versions
    assert post(api, "/api/v1/memories/outcome", body, "out-2").status_code == 200  # a new key: applied again
    assert memory.history.count() == versions + 1


def test_expired_keys_are_purged_and_free_again(api, catalogue, settings):
    assert post(api, CONFIRM, BODY, "k").status_code == 200
    IdempotentRequest.objects.update(created_at=timezone.now() - timezone.timedelta(days=2))
    r = post(api, CONFIRM, BODY, "k")
    assert r.status_code == 200 and "Idempotent-Replayed" not in r and r.json()["phrase"]["occurrence_count"] == 2
    IdempotentRequest.objects.update(created_at=timezone.now() - timezone.timedelta(days=2))
    assert idempotent_requests_purge() == 1 and not IdempotentRequest.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_apply_once(catalogue):
    client = make_client(["resolve", "feedback"])
    raw = client.raw
    n = 8
    barrier = threading.Barrier(n)
    answers, errors = [None] * n, []

    def worker(i):
        from rest_framework.test import APIClient

        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        try:
            barrier.wait()
            answers[i] = post(c, CONFIRM, BODY, "once")
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert [a.status_code for a in answers] == [200] * n
    assert sum(1 for a in answers if "Idempotent-Replayed" not in a) == 1
    assert all(a.json() == answers[0].json() for a in answers)
    assert LearnedPhrase.objects.get(normalized=BODY["text"], user_id="alice").occurrence_count == 1


def test_the_schema_offers_the_header_only_where_an_agent_key_may_write(api):
    paths = api.get("/api/schema/?format=json").json()["paths"]

    def headers(path, method="post"):
        return [p["name"] for p in paths[path][method].get("parameters", []) if p["in"] == "header"]

    assert "Idempotency-Key" in headers("/api/v1/resolutions/confirm")
    assert "Idempotency-Key" in headers("/api/v1/blocklist/{block_id}", "delete")
    assert "Idempotency-Key" not in headers("/api/v1/proposals/{id}", "get")
    # Only a reviewer's token may call these, and a reviewer's token cannot send a key (a 400).
    for path in ("/api/v1/autonomy/transitions/{id}/approve", "/api/v1/actions/{name}/stop"):
        assert "Idempotency-Key" not in headers(path)


def test_a_body_too_large_with_a_key_is_refused_unread(gov_api, catalogue, settings, monkeypatch):
    settings.LEARNING_IMPORT_MAX_BYTES = 10
    parsed = []
    parse = MultiPartParser.parse
    monkeypatch.setattr(MultiPartParser, "parse", lambda self, *a, **kw: parsed.append(1) or parse(self, *a, **kw))
    upload = SimpleUploadedFile("p.csv", b"phrase,verb\n" + b"x" * 200_000, content_type="text/csv")
    r = gov_api.post("/api/v1/learning/import", {"format": "csv", "file": upload}, format="multipart", HTTP_IDEMPOTENCY_KEY="i-1")
    assert r.status_code == 413 and "body" in r.json()["fields"]
    assert not parsed  # the upload was not read (to disk) only to hash it
    r = post(gov_api, "/api/v1/learning/import", {"format": "csv", "content": "x" * 200_000}, "i-2")
    assert r.status_code == 413
    settings.API_MAX_BODY_BYTES = 1000  # a view without a limit of its own, whose handler reads no body
    r = gov_api.post("/api/v1/blocklist/1/expire", {"pad": "x" * 2000}, format="json", HTTP_IDEMPOTENCY_KEY="i-3")
    assert r.status_code == 413
    assert not IdempotentRequest.objects.exists()


def test_a_replay_says_x_embedding_pending_when_the_answer_did(api, failing_embedder):
    """The memory was stored without its vector (embedder down): the answer says so, and so does its replay;
    an answer that did not say it is replayed without it."""
    body = {
        "user_id": "alice",
        "user_message": "How do I rotate the application logs on the staging servers?",
        "assistant_message": "Run logrotate nightly with the app config.",
    }
    first = post(api, "/api/v1/memories/observe", body, "observe-pending")
    assert first.status_code == 200 and first["X-Embedding-Pending"] == "1"
    again = post(api, "/api/v1/memories/observe", body, "observe-pending")
    assert again["Idempotent-Replayed"] == "true" and again["X-Embedding-Pending"] == "1"
    assert again.json() == first.json()
    assert IdempotentRequest.objects.get(key="observe-pending").embedding_pending is True


def test_a_replay_of_an_answer_without_pending_vectors_does_not_say_it(api, catalogue):
    first = post(api, CONFIRM, BODY, "confirm-embedded")
    again = post(api, CONFIRM, BODY, "confirm-embedded")
    assert "X-Embedding-Pending" not in first and "X-Embedding-Pending" not in again
    assert again["Idempotent-Replayed"] == "true"


def test_an_answered_error_keeps_nothing_the_request_wrote(gov_api, catalogue, monkeypatch):
    """A service that wrote (in a savepoint it committed) and then refused answers 4xx and leaves nothing: the
    request's transaction is rolled back, and with it the idempotency claim, so the retry runs."""
    from django.db import transaction

    from common.api import ApplicationError
    from learning import api as learning_api
    from learning.models import EntityAlias

    def writes_then_refuses(**kwargs):
        with transaction.atomic():
            EntityAlias.objects.create(alias="half written", normalized="half written", canonical_name="x", entity_type="cbu")
        raise ApplicationError("Refused after a write.", field="phrase")

    monkeypatch.setattr(learning_api, "phrase_block_add", writes_then_refuses)
    body = {"phrase": "wipe everything", "verb": "cbu.delete", "reason": "dangerous"}
    answer = gov_api.post("/api/v1/blocklist", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert answer.status_code == 400 and answer.json()["fields"] == {"phrase": ["Refused after a write."]}
    assert not EntityAlias.objects.filter(normalized="half written").exists()
    assert not IdempotentRequest.objects.filter(key="k-1").exists()
    monkeypatch.undo()
    assert gov_api.post("/api/v1/blocklist", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1").status_code == 201
