"""A data subject's request: everything stored about one user of one tenant is erased, in one transaction, and
nothing of anyone else's."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from common.api import ApplicationError
from learning.models import (
    DecisionFit,
    DecisionHead,
    DisambiguationRequest,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    ResolutionRecord,
)
from learning.services.blocks import phrase_block_add
from learning.services.candidates import candidate_record
from learning.services.corrections import phrase_correction_apply
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from privacy.services import user_data_erase
from review.models import Decision, Kind
from review.services import item_decide
from tenants.context import tenant_scope
from tenants.models import Tenant
from tenants.selectors import tenant_default
from tenants.services import tenant_create
from tests.conftest import OBSERVE, RETRIEVE, make_client, reviewer_client, reviewer_user

pytestmark = pytest.mark.django_db

SECRET = "Use the access key AKIAIOSFODNN7EXAMPLQ with the deploy role for the nightly export job."
LESSON = "Rotate the application logs with logrotate every night and keep fourteen compressed copies."
USER_MODELS = (
    LearnedPhrase,
    PhraseBlock,
    LearningCandidate,
    LearningSignal,
    DisambiguationRequest,
    PhraseEvidence,
    ResolutionRecord,
    Memory,
    MemoryQuarantine,
    MemoryRetrieval,
)


def _use(api, user_id: str) -> dict:
    """What a user leaves behind: a click, a correction, a block, a candidate a reviewer approves, a lesson, a
    quarantined lesson a reviewer discards, a retrieval."""
    body = api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": user_id}, format="json").json()
    assert body["outcome"] == "ambiguous", body
    r = api.post(
        f"/api/v1/disambiguations/{body['request_id']}/select",
        {"selected_verb": body["options"][0]["verb"], "user_id": user_id},
        format="json",
    )
    assert r.status_code == 200, r.content
    r = api.post(
        "/api/v1/resolutions/correct",
        {"text": "wipe my client unit", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": user_id},
        format="json",
    )
    assert r.status_code == 200, r.content
    phrase_block_add(phrase="remove every unit", verb_name="cbu.delete", user_id=user_id)
    candidate = candidate_record(
        input_pattern=f"show the units of {user_id}", suggested_output="cbu.list", user_id=user_id, source="click", confidence=0.3
    )
    observed = {"user_id": user_id, "user_message": "How do we rotate logs?", "assistant_message": LESSON}
    assert api.post(OBSERVE, observed, format="json").status_code == 200
    quarantined = api.post(
        OBSERVE, {"user_id": user_id, "user_message": "How do I reach the bucket?", "assistant_message": SECRET}, format="json"
    ).json()
    assert api.post(RETRIEVE, {"user_id": user_id, "query": "log rotation"}, format="json").status_code == 200
    return {"candidate": candidate.pk, "quarantine": quarantined["evidence"]["quarantine_id"]}


def _erase(**kwargs) -> dict:
    """The erasure, as the command, the API and the admin page run it: in the scope of the user's tenant."""
    with tenant_scope([tenant_default().pk]):
        return user_data_erase(**kwargs)


def _rows(user_id: str) -> dict:
    counts = {m.__name__: m.objects.filter(user_id=user_id).count() for m in USER_MODELS}
    counts.update(
        {
            f"history {m.__name__}": m.history.filter(user_id=user_id).count()
            for m in (LearnedPhrase, LearningCandidate, PhraseBlock, Memory)
        }
    )
    return counts


@pytest.fixture
def used(cbus):
    api = make_client(["resolve", "feedback", "governance"], name="assistant")
    reviewer = reviewer_user("rita", superuser=True)
    items = {u: _use(api, u) for u in ("alice", "bob")}
    for u in ("alice", "bob"):
        item_decide(kind=Kind.CANDIDATE, object_id=items[u]["candidate"], user=reviewer, verdict="approve", confirmed=True)
        item_decide(kind=Kind.QUARANTINE, object_id=items[u]["quarantine"], user=reviewer, verdict="reject")
    return items


def test_everything_of_the_user_goes_and_nothing_of_anyone_elses(used):
    alice, bob = _rows("alice"), _rows("bob")
    globals_before = LearnedPhrase.objects.filter(user_id__isnull=True).count()
    assert all(alice.values()), alice  # every kind of row, and its audit trail, exists before
    counted = _erase(user_id="alice", dry_run=True)
    assert _rows("alice") == alice  # a dry run deletes nothing
    assert counted["rows"]["learning_learnedphrase"] == alice["LearnedPhrase"]

    erased = _erase(user_id="alice")
    assert not any(_rows("alice").values()), _rows("alice")
    assert _rows("bob") == bob
    assert sum(erased["rows"].values()) >= sum(v for k, v in alice.items() if not k.startswith("history"))
    assert erased["rows"]["memories_memory"] == alice["Memory"]
    # the review log keeps who decided what kind of item, how and when, not the user's texts
    assert erased["decisions_scrubbed"] == 2
    for kind, key in ((Kind.CANDIDATE, "candidate"), (Kind.QUARANTINE, "quarantine")):
        decision = Decision.objects.get(kind=kind, object_id=used["alice"][key])
        assert "alice" not in decision.summary and decision.verdict
        assert "bob" in Decision.objects.get(kind=kind, object_id=used["bob"][key]).summary
    # the global vocabulary stays: a global phrase holds no user
    assert LearnedPhrase.objects.filter(user_id__isnull=True).count() == globals_before

    again = _erase(user_id="alice")  # idempotent: nothing left to erase
    assert again["rows"] == {} and again["history"] == {}


def _click(api, text: str, user_id: str) -> str:
    body = api.post("/api/v1/resolve", {"text": text, "user_id": user_id}, format="json").json()
    assert body["outcome"] == "ambiguous", body
    verb = body["options"][0]["verb"]
    r = api.post(
        f"/api/v1/disambiguations/{body['request_id']}/select", {"selected_verb": verb, "user_id": user_id}, format="json"
    )
    assert r.status_code == 200, r.content
    return verb


def test_a_pending_global_candidate_only_the_users_clicks_proposed_goes_too(used, django_capture_on_commit_callbacks):
    api = make_client(["resolve", "feedback"], name="clicker")

    def click(text, user_id):
        with django_capture_on_commit_callbacks(execute=True):  # the click's learning runs, as after its commit
            return _click(api, text, user_id)

    verb = click("cbus of mine please", "alice")
    shared_verb = click("every cbu there is", "alice")
    click("every cbu there is", "bob")
    again = click("cbus I have", "alice")
    first = LearningCandidate.objects.get(user_id__isnull=True, normalized="cbus i have", suggested_output=again)
    item_decide(kind=Kind.CANDIDATE, object_id=first.pk, user=reviewer_user("ria", superuser=True), verdict="reject")
    assert click("cbus I have", "bob") == again  # a new proposal, bob's alone
    only_hers = LearningCandidate.objects.get(user_id__isnull=True, normalized="cbus of mine please", suggested_output=verb)
    shared = LearningCandidate.objects.get(user_id__isnull=True, normalized="every cbu there is", suggested_output=shared_verb)
    assert only_hers.occurrence_count == 1 and shared.occurrence_count == 2  # alice and bob both clicked the second
    bobs = LearningCandidate.objects.get(user_id__isnull=True, normalized="cbus i have", status="pending")
    corrected_verb = click("all my cbus please", "alice")
    corrected = LearningCandidate.objects.get(user_id__isnull=True, normalized="all my cbus please")
    wrong = next(v for v in ("cbu.list", "cbu.show") if v != corrected_verb)
    phrase_correction_apply(
        text="all my cbus please", wrong_verb=wrong, correct_verb=corrected_verb, user_id=None
    )  # a global correction of the same text to the same verb: one more occurrence, not alice's
    corrected.refresh_from_db()
    assert corrected.occurrence_count == 2

    counted = _erase(user_id="alice", dry_run=True)
    assert LearningCandidate.objects.filter(pk=only_hers.pk).exists()
    erased = _erase(user_id="alice")
    assert not LearningCandidate.objects.filter(pk=only_hers.pk).exists()
    assert not LearningCandidate.history.filter(id=only_hers.pk).exists()
    assert LearningCandidate.objects.filter(pk=shared.pk).exists()  # bob proposed it too: it stays, his words as well
    assert LearningCandidate.objects.filter(pk=corrected.pk).exists()  # a correction proposed it too
    assert LearningCandidate.objects.filter(pk=bobs.pk).exists()  # alice's click went into the rejected one before it
    # the dry run counted what the erasure deleted, the audit rows the deletions write included
    assert counted["rows"] == erased["rows"] and counted["history"] == erased["history"]


def test_the_users_classifier_heads_go_too(used):
    fit = DecisionFit.objects.create(version=99, source="labels", status="retired", embedding_model="m")
    DecisionHead.objects.create(fit=fit, user_id="alice", weights=b"x")
    DecisionHead.objects.create(fit=fit, user_id="bob", weights=b"y")
    _erase(user_id="alice")
    assert list(DecisionHead.objects.values_list("user_id", flat=True)) == ["bob"]


def test_another_tenants_user_of_the_same_id_keeps_everything(used):
    other = tenant_create(slug="other")
    api = make_client(["resolve", "feedback"], name="elsewhere", tenant=other)
    body = {"user_id": "alice", "user_message": "How do we rotate logs?", "assistant_message": LESSON}
    assert api.post(OBSERVE, body, format="json").status_code == 200
    with tenant_scope([other.pk]):
        assert Memory.objects.filter(user_id="alice").count() == 1
    call_command("erase_user", "alice", "--tenant", "default", stdout=StringIO())
    assert not Memory.objects.filter(user_id="alice").exclude(tenant=other).exists()
    with tenant_scope([other.pk]):
        assert Memory.objects.filter(user_id="alice").count() == 1
        assert Memory.history.filter(user_id="alice").exists()


def test_the_command_names_what_it_deletes_and_refuses_bad_input(used):
    out = StringIO()
    call_command("erase_user", "alice", "--dry-run", stdout=out)  # one tenant: no --tenant needed
    assert "would delete" in out.getvalue() and "learning_learnedphrase" in out.getvalue()
    assert Memory.objects.filter(user_id="alice").exists()
    call_command("erase_user", "alice", stdout=out)
    assert "deleted" in out.getvalue() and not Memory.objects.filter(user_id="alice").exists()
    with pytest.raises(CommandError, match="user_id"):
        call_command("erase_user", "not a user id!")
    with pytest.raises(CommandError, match="No tenant"):
        call_command("erase_user", "bob", "--tenant", "nowhere")
    tenant_create(slug="second")
    with pytest.raises(CommandError, match="--tenant"):
        call_command("erase_user", "bob")
    assert Memory.objects.filter(user_id="bob").exists()
    with pytest.raises(ApplicationError, match="Not a user id"):
        _erase(user_id="")


ERASE = "/api/v1/users/erase"


def test_a_reviewer_who_may_delete_phrases_and_memories_erases_over_the_api(used):
    eraser = reviewer_client(reviewer_user("dora", "delete_learnedphrase", "delete_memory"))
    counted = eraser.post(ERASE, {"user_id": "alice", "dry_run": True}, format="json")
    assert counted.status_code == 200, counted.json()
    assert counted.json()["tenant"] == "default"
    assert counted.json()["rows"]["memories_memory"] == Memory.objects.filter(user_id="alice").count() == 1
    assert Memory.objects.filter(user_id="alice").exists()
    erased = eraser.post(ERASE, {"user_id": "alice"}, format="json")
    assert erased.status_code == 200 and erased.json()["decisions_scrubbed"] == 2
    assert not any(_rows("alice").values()) and all(v for k, v in _rows("bob").items() if not k.startswith("history"))


def test_erasure_over_the_api_refuses_agents_other_reviewers_and_bad_input(used):
    agent = make_client(["resolve", "feedback", "governance"], name="keyed")
    assert agent.post(ERASE, {"user_id": "alice"}, format="json").status_code == 403  # never an agent key
    reader = reviewer_client(reviewer_user("rick", "delete_learnedphrase"))
    assert reader.post(ERASE, {"user_id": "alice"}, format="json").status_code == 403  # may not delete memories
    root = reviewer_client(reviewer_user("root", superuser=True))
    r = root.post(ERASE, {"user_id": "al ice"}, format="json")
    assert r.status_code == 400 and "user_id" in r.json()["fields"]
    r = root.post(ERASE, {"user_id": "alice", "dry_run": "yes"}, format="json")
    assert r.status_code == 400 and "dry_run" in r.json()["fields"]
    assert root.post(ERASE, {"user_id": "alice", "tenant": "nowhere"}, format="json").status_code == 404
    tenant_create(slug="second")  # a superuser now sees two tenants: the user's must be named
    r = root.post(ERASE, {"user_id": "alice"}, format="json")
    assert r.status_code == 409 and r.json()["code"] == "ambiguous"
    assert Memory.objects.filter(user_id="alice").exists()  # nothing refused deleted anything
    assert root.post(ERASE, {"user_id": "alice", "tenant": "default"}, format="json").status_code == 200
    assert not Memory.objects.filter(user_id="alice").exists()


def test_a_reviewer_erases_in_the_admin_after_seeing_what_would_go(used):
    from django.test import Client

    web = Client()
    web.force_login(reviewer_user("erin", "delete_learnedphrase", "delete_memory"))
    assert 'href="/admin/users/erase/"' in web.get("/admin/").content.decode()
    default = Tenant.objects.get(slug="default")
    preview = web.post("/admin/users/erase/", {"user_id": "alice", "tenant": default.pk})
    assert preview.status_code == 200 and 'id="erase-preview"' in preview.content.decode()
    assert "memories_memory" in preview.content.decode()
    assert Memory.objects.filter(user_id="alice").exists()  # a preview deletes nothing
    done = web.post("/admin/users/erase/", {"user_id": "alice", "tenant": default.pk, "confirm": "yes"}, follow=True)
    assert "Erased user alice of default" in done.content.decode()
    assert not any(_rows("alice").values()) and Memory.objects.filter(user_id="bob").exists()

    refused = web.post("/admin/users/erase/", {"user_id": "bo b", "tenant": default.pk, "confirm": "yes"})
    assert refused.status_code == 200 and "Not a user id" in refused.content.decode()
    other = tenant_create(slug="not-hers")
    refused = web.post("/admin/users/erase/", {"user_id": "bob", "tenant": other.pk, "confirm": "yes"})
    assert refused.status_code == 200 and "errorlist" in refused.content.decode()  # not one of the reviewer's tenants
    assert Memory.objects.filter(user_id="bob").exists()

    web.force_login(reviewer_user("ned", "delete_learnedphrase"))
    assert web.get("/admin/users/erase/").status_code == 403
    assert 'href="/admin/users/erase/"' not in web.get("/admin/").content.decode()


def test_the_logs_of_items_deleted_before_the_erasure_lose_the_users_texts_too(used, su):
    from django.contrib.admin.models import DELETION, LogEntry

    phrase = LearnedPhrase.objects.filter(user_id="alice").first()
    assert su.post(f"/admin/learning/learnedphrase/{phrase.pk}/delete/", {"post": "yes"}).status_code == 302
    item = MemoryQuarantine.objects.get(pk=used["alice"]["quarantine"])
    assert su.post(f"/admin/memories/memoryquarantine/{item.pk}/delete/", {"post": "yes"}).status_code == 302
    assert LogEntry.objects.filter(action_flag=DELETION).count() == 2
    assert not LogEntry.objects.filter(object_repr__contains="alice").exists()  # kind and key, never the text
    erased = _erase(user_id="alice")
    assert erased["admin_log_scrubbed"] >= 1 and erased["decisions_scrubbed"] == 2
    assert not LogEntry.objects.filter(object_repr__contains="alice").exists()
    assert not Decision.objects.filter(summary__contains="alice").exists()
    assert Decision.objects.filter(summary__contains="bob").count() == 2


def test_the_schema_names_every_answer_of_the_erasure(used):
    root = reviewer_client(reviewer_user("root", superuser=True))
    operation = root.get("/api/schema/", {"format": "json"}).json()["paths"]["/api/v1/users/erase"]["post"]
    assert {"200", "400", "403", "404", "409"} <= set(operation["responses"])


def test_another_process_that_knew_the_users_head_answers_with_the_deployments(db):
    from learning.resolution import resolve
    from learning.selectors import decision_cache_clear
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit
    from tests.test_learning_decision import BIG

    verb_catalogue_load(entries=BIG)
    fit = decision_prior_fit()
    deployment = DecisionHead.objects.get(fit=fit, user_id=None)
    for user in ("alice", "bob"):
        DecisionHead.objects.create(fit=fit, user_id=user, weights=deployment.weights, anchors=deployment.anchors)
    decision_cache_clear()
    text = "please send an email to my manager"
    assert not resolve(text=text, user_id="bob").degraded  # this process now knows which users have a head
    _erase(user_id="alice")  # in this test's transaction: the clear on commit does not run, as elsewhere
    answer = resolve(text=text, user_id="alice")
    assert not answer.degraded, answer.degraded_reason


@pytest.mark.django_db(transaction=True)
def test_an_erasure_while_the_user_clicks_waits_for_the_click_and_erases_it_too(cbus, monkeypatch):
    import threading
    import time

    from django.db import connection

    import learning.services.disambiguations as disambiguations

    monkeypatch.setattr(disambiguations, "_signals_enqueue", lambda pk: None)
    api = make_client(["resolve", "feedback"], name="assistant")
    body = api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    root = reviewer_client(reviewer_user("root", superuser=True))
    clicked, answers, label = threading.Event(), {}, disambiguations.resolution_label

    def label_then_wait(**kw):  # the click holds its request and has written its signals
        label(**kw)
        clicked.set()
        time.sleep(1.5)

    monkeypatch.setattr(disambiguations, "resolution_label", label_then_wait)

    def click():
        try:
            option = body["options"][0]["verb"]
            answers["click"] = api.post(
                f"/api/v1/disambiguations/{body['request_id']}/select",
                {"selected_verb": option, "user_id": "alice"},
                format="json",
            ).status_code
        finally:
            connection.close()

    thread = threading.Thread(target=click)
    thread.start()
    assert clicked.wait(20)
    erased = root.post("/api/v1/users/erase", {"user_id": "alice", "tenant": "default"}, format="json")
    thread.join(30)
    assert answers["click"] == 200 and erased.status_code == 200, (answers, erased.content[:300])
    assert not DisambiguationRequest.objects.filter(user_id="alice").exists()
    assert not LearningSignal.objects.exists()  # the click's signals went with it


@pytest.mark.django_db(transaction=True)
def test_an_erasure_and_a_quarantine_release_of_the_user_run_one_after_the_other(db):
    import threading
    import time

    from django.db import connection

    import memories.services.quarantine as quarantine
    from tenants.selectors import tenant_default

    tenant = tenant_default().pk
    api = make_client(["resolve", "feedback"], name="assistant")
    observed = {"user_id": "alice", "user_message": "How do I reach the bucket?", "assistant_message": SECRET}
    item = MemoryQuarantine.objects.get(pk=api.post(OBSERVE, observed, format="json").json()["evidence"]["quarantine_id"])
    holding, errors, store = threading.Event(), {}, quarantine.memory_store

    def wait_then_store(**kw):  # the release holds its item, and next takes the user's scope to store
        holding.set()
        time.sleep(1.5)
        return store(**kw)

    quarantine.memory_store = wait_then_store
    try:

        def release():
            try:
                with tenant_scope([tenant]):
                    quarantine.quarantine_release(
                        item=item, actor="rita", content="Use the deploy role for the nightly export job."
                    )
            except Exception as exc:  # noqa: BLE001
                errors["release"] = repr(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=release)
        thread.start()
        assert holding.wait(20)
        with tenant_scope([tenant]):
            user_data_erase(user_id="alice")
        thread.join(30)
    finally:
        quarantine.memory_store = store
    assert errors == {}
    with tenant_scope([tenant]):  # the release finished first; the erasure then took what it stored
        assert not Memory.objects.filter(user_id="alice").exists()
        assert not MemoryQuarantine.objects.filter(user_id="alice").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("writer", ["confirmation", "correction"])
def test_an_erasure_during_a_confirmation_or_correction_waits_and_erases_all_it_wrote(cbus, monkeypatch, writer):
    import threading
    import time

    from django.db import connection

    import learning.services.decisions as decisions

    api = make_client(["resolve", "feedback"], name="assistant")
    root = reviewer_client(reviewer_user("root", superuser=True))
    assert api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").status_code == 200
    labelling, answers, due, times = threading.Event(), {}, decisions._refit_if_due, {}

    def labelled_then_wait():  # the writer has added the phrase and evidence and labelled the record; not committed
        labelling.set()
        time.sleep(1.5)
        due()
        times["writer_done"] = time.monotonic()

    monkeypatch.setattr(decisions, "_refit_if_due", labelled_then_wait)
    url, body = {
        "confirmation": ("/api/v1/resolutions/confirm", {"text": "list all cbus", "verb": "cbu.list"}),
        "correction": (
            "/api/v1/resolutions/correct",
            {"text": "list all cbus", "wrong_verb": "cbu.list", "correct_verb": "cbu.show"},
        ),
    }[writer]

    def write():
        try:
            answers[writer] = api.post(url, {**body, "user_id": "alice"}, format="json").status_code
        finally:
            connection.close()

    thread = threading.Thread(target=write)
    thread.start()
    assert labelling.wait(20)
    times["erasure_sent"] = time.monotonic()
    erased = root.post(ERASE, {"user_id": "alice", "tenant": "default"}, format="json")
    thread.join(30)
    assert answers[writer] == 200 and erased.status_code == 200, (answers, erased.content[:300])
    assert times["erasure_sent"] < times["writer_done"]  # the erasure began while the writer held its rows
    assert erased.json()["rows"]["learning_learnedphrase"] == 1  # it waited for the writer, and took what it wrote
    for model in (LearnedPhrase, PhraseEvidence, ResolutionRecord, DisambiguationRequest):
        assert not model.objects.filter(user_id="alice").exists(), model
    assert not LearnedPhrase.history.filter(user_id="alice").exists()
