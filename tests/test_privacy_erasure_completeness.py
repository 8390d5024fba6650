"""An erasure leaves nothing of the user's words: not in the admin's log of changes (whenever a row of theirs went),
not in a global candidate only they proposed once a reviewer rejected it, not in one they shared with users erased
since; and it never runs outside one tenant's scope."""

import json
from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import RequestFactory

from common.admin import LogWithoutTexts
from common.api import ApplicationError
from learning.models import (
    DisambiguationRequest,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseEvidence,
    PhraseImportJob,
    ResolutionRecord,
)
from learning.services.corrections import phrase_correction_apply
from learning.services.users import USER_MODELS
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from privacy.services import user_data_erase
from review.models import Decision, Kind
from review.services import item_decide
from tenants.context import ALL, tenant_scope
from tenants.selectors import tenant_default
from tenants.services import tenant_create
from tests.conftest import make_client, reviewer_user
from tests.test_privacy_erasure import _click, _erase, _use

pytestmark = pytest.mark.django_db

# What alice's rows say of her (``_use``): her texts, and her id in the rows' names.
HER_WORDS = ("alice", "list all cbus", "How do I reach the bucket", "import of 3 rows")


def _named_anywhere_in_the_admin_log() -> list[str]:
    texts = LogEntry.objects.values_list("object_repr", "change_message")
    return sorted({word for repr_, message in texts for word in HER_WORDS if word in repr_ or word in message})


@pytest.fixture
def alice(cbus):
    api = make_client(["resolve", "feedback", "governance"], name="assistant")
    items = _use(api, "alice")
    PhraseImportJob.objects.create(user_id="alice", row_count=3, rows=[{"number": 1, "phrase": "p", "verb": "cbu.list"}])
    return items


def _one_row_each(items) -> dict:
    """A row of alice's of each kind whose admin has no audit trail behind it, and a learned phrase."""
    return {
        LearningSignal: LearningSignal.objects.filter(user_id="alice").first(),  # before its request, which it goes with
        DisambiguationRequest: DisambiguationRequest.objects.filter(user_id="alice").first(),
        ResolutionRecord: ResolutionRecord.objects.filter(user_id="alice").first(),
        PhraseEvidence: PhraseEvidence.objects.filter(user_id="alice").first(),
        PhraseImportJob: PhraseImportJob.objects.get(user_id="alice"),
        MemoryRetrieval: MemoryRetrieval.objects.get(user_id="alice"),
        MemoryQuarantine: MemoryQuarantine.objects.get(pk=items["quarantine"]),
        LearnedPhrase: LearnedPhrase.objects.filter(user_id="alice").first(),
    }


def test_a_deletion_in_the_admin_logs_the_rows_kind_and_key_not_its_text(alice, su):
    rows = _one_row_each(alice)
    assert all(rows.values()), rows
    for model, row in rows.items():
        opts = model._meta
        page = su.post(f"/admin/{opts.app_label}/{opts.model_name}/{row.pk}/delete/", {"post": "yes"})
        assert page.status_code == 302, (model, page.status_code)
        entry = LogEntry.objects.get(content_type__model=opts.model_name, object_id=str(row.pk))
        assert entry.object_repr == f"{opts.verbose_name} #{row.pk}" and entry.change_message == ""
    assert _named_anywhere_in_the_admin_log() == []
    _erase(user_id="alice")
    assert _named_anywhere_in_the_admin_log() == []


def test_the_deletions_of_a_bulk_action_are_logged_without_texts(alice, su):
    ids = list(LearningSignal.objects.filter(user_id="alice").values_list("pk", flat=True)[:3])
    assert len(ids) == 3
    page = su.post("/admin/learning/learningsignal/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert page.status_code == 302 and not LearningSignal.objects.filter(pk__in=ids).exists()
    logged = set(LogEntry.objects.filter(content_type__model="learningsignal").values_list("object_id", "object_repr"))
    assert logged == {(str(pk), f"learning signal #{pk}") for pk in ids}


def test_a_change_in_the_admin_logs_the_fields_changed_not_the_text(alice, su):
    item = MemoryQuarantine.objects.get(pk=alice["quarantine"])
    clean = "Use the deploy role for the nightly export job; the key lives in the vault."
    page = su.post(
        f"/admin/memories/memoryquarantine/{item.pk}/change/",
        {"redacted_preview": clean, "initial-redacted_preview": item.redacted_preview},
    )
    assert page.status_code == 302, page.content[:500]
    entry = LogEntry.objects.get(content_type__model="memoryquarantine", object_id=str(item.pk), action_flag=CHANGE)
    assert entry.object_repr == f"quarantined memory #{item.pk}"
    assert json.loads(entry.change_message) == [{"changed": {"fields": ["Redacted preview"]}}]


def test_an_inline_rows_change_message_names_it_by_kind_and_key():
    """Django names each inline row added, changed or deleted by its ``__str__`` (here the user's text)."""
    model_admin = admin.site._registry[DisambiguationRequest]
    request = DisambiguationRequest(pk=7, text="list all cbus of alice")
    signal = LearningSignal(pk=9, request=request, phrase="list all cbus of alice", verb="cbu.list", confidence=0.5)
    gone = LearningSignal(phrase="show alice's units", verb="cbu.show", confidence=0.5)  # deleted: no key any more
    formset = SimpleNamespace(new_objects=[signal], changed_objects=[], deleted_objects=[gone])
    message = model_admin.construct_change_message(RequestFactory().get("/"), SimpleNamespace(changed_data=[]), [formset])
    assert message == [
        {"added": {"name": "learning signal", "object": f"learning signal #{signal.pk}"}},
        {"deleted": {"name": "learning signal", "object": "learning signal"}},
    ]


def test_every_admin_of_a_users_rows_logs_without_texts():
    registered = [m for m in (*USER_MODELS, Memory, MemoryQuarantine, MemoryRetrieval) if m in admin.site._registry]
    assert {DisambiguationRequest, ResolutionRecord, PhraseEvidence, LearningSignal, PhraseImportJob} <= set(registered)
    assert {Memory, MemoryQuarantine, MemoryRetrieval, LearnedPhrase, LearningCandidate} <= set(registered)
    for model in registered:
        assert isinstance(admin.site._registry[model], LogWithoutTexts), model


def test_the_log_entries_of_rows_still_there_lose_their_texts(alice):
    """Entries an admin wrote with the rows' texts (before its log named rows by kind and key) are scrubbed, for
    every kind of the user's rows, those with no audit trail too."""
    root = reviewer_user("root", superuser=True)
    rows = _one_row_each(alice)
    for row in rows.values():
        LogEntry.objects.log_actions(user_id=root.pk, queryset=[row], action_flag=CHANGE, change_message=str(row))
    assert _named_anywhere_in_the_admin_log() != []
    counted = _erase(user_id="alice", dry_run=True)
    assert counted["admin_log_scrubbed"] == len(rows)
    erased = _erase(user_id="alice")
    assert erased["admin_log_scrubbed"] == len(rows)
    assert _named_anywhere_in_the_admin_log() == []
    assert LogEntry.objects.count() == len(rows)  # who changed what kind of row, and when, stays


def test_a_global_candidate_only_she_proposed_goes_once_a_reviewer_rejected_it(cbus, django_capture_on_commit_callbacks):
    api = make_client(["resolve", "feedback"], name="clicker")
    with django_capture_on_commit_callbacks(execute=True):  # the click's learning runs, as after its commit
        verb = _click(api, "cbus of mine please", "alice")
    candidate = LearningCandidate.objects.get(user_id__isnull=True, normalized="cbus of mine please", suggested_output=verb)
    item_decide(kind=Kind.CANDIDATE, object_id=candidate.pk, user=reviewer_user("ria", superuser=True), verdict="reject")
    candidate.refresh_from_db()
    assert candidate.status == LearningCandidate.Status.REJECTED
    assert Decision.objects.filter(kind=Kind.CANDIDATE, object_id=candidate.pk, summary__contains="cbus of mine").exists()

    counted = _erase(user_id="alice", dry_run=True)
    erased = _erase(user_id="alice")
    assert not LearningCandidate.objects.filter(pk=candidate.pk).exists()
    assert not LearningCandidate.history.filter(id=candidate.pk).exists()
    decision = Decision.objects.get(kind=Kind.CANDIDATE, object_id=candidate.pk)
    assert "cbus of mine" not in decision.summary and decision.verdict == Decision.Verdict.REJECT
    assert counted["rows"] == erased["rows"] and counted["history"] == erased["history"]


def test_a_global_candidate_approved_from_her_click_stays(cbus, django_capture_on_commit_callbacks):
    api = make_client(["resolve", "feedback"], name="clicker")
    with django_capture_on_commit_callbacks(execute=True):
        verb = _click(api, "cbus of mine please", "alice")
    candidate = LearningCandidate.objects.get(user_id__isnull=True, normalized="cbus of mine please", suggested_output=verb)
    reviewer = reviewer_user("ria", superuser=True)
    item_decide(kind=Kind.CANDIDATE, object_id=candidate.pk, user=reviewer, verdict="approve", confirmed=True)
    _erase(user_id="alice")
    assert LearningCandidate.objects.filter(pk=candidate.pk).exists()  # the tenant's vocabulary now


def test_a_shared_global_candidate_goes_with_the_erasure_of_its_last_proposer(cbus, django_capture_on_commit_callbacks):
    api = make_client(["resolve", "feedback"], name="clicker")
    with django_capture_on_commit_callbacks(execute=True):
        verb = _click(api, "every cbu there is", "alice")
        assert _click(api, "every cbu there is", "bob") == verb
    shared = LearningCandidate.objects.get(user_id__isnull=True, normalized="every cbu there is", suggested_output=verb)
    assert shared.occurrence_count == 2

    _erase(user_id="bob", dry_run=True)
    shared.refresh_from_db()
    assert shared.occurrence_count == 2  # a dry run changes nothing
    _erase(user_id="bob")
    shared.refresh_from_db()
    assert shared.occurrence_count == 1 and shared.status == LearningCandidate.Status.PENDING  # alice's click is left
    _erase(user_id="alice")
    assert not LearningCandidate.objects.filter(pk=shared.pk).exists()
    assert not LearningCandidate.history.filter(id=shared.pk).exists()


def test_a_shared_global_candidate_keeps_the_occurrences_no_erased_user_made(cbus, django_capture_on_commit_callbacks):
    api = make_client(["resolve", "feedback"], name="clicker")
    with django_capture_on_commit_callbacks(execute=True):
        verb = _click(api, "every cbu there is", "alice")
        _click(api, "every cbu there is", "bob")
        _click(api, "every cbu there is", "carol")
    shared = LearningCandidate.objects.get(user_id__isnull=True, normalized="every cbu there is", suggested_output=verb)
    wrong = next(v for v in ("cbu.list", "cbu.show") if v != verb)
    phrase_correction_apply(text="every cbu there is", wrong_verb=wrong, correct_verb=verb, user_id=None)
    shared.refresh_from_db()
    assert shared.occurrence_count == 4  # three clicks and a global correction

    _erase(user_id="alice")
    shared.refresh_from_db()
    assert shared.occurrence_count == 3
    # a count already lower than the clicks still recorded (one lost in an older release) never drops below them
    LearningCandidate.objects.filter(pk=shared.pk).update(occurrence_count=2)
    _erase(user_id="bob")
    shared.refresh_from_db()
    assert shared.occurrence_count == 1 == LearningSignal.objects.filter(global_candidate_id=shared.pk).count()
    LearningCandidate.objects.filter(pk=shared.pk).update(occurrence_count=2)  # carol's click and the correction
    _erase(user_id="carol")
    shared.refresh_from_db()
    assert shared.occurrence_count == 1  # the correction's occurrence: it stays


@pytest.mark.parametrize("scope", [None, ALL, "two"])
def test_the_erasure_refuses_to_run_outside_one_tenants_scope(alice, scope):
    other = tenant_create(slug="other")
    with pytest.raises(ApplicationError) as refused:
        if scope is None:
            user_data_erase(user_id="alice")
        else:
            with tenant_scope(ALL if scope == ALL else [tenant_default().pk, other.pk]):
                user_data_erase(user_id="alice")
    assert refused.value.field == "tenant"
    assert Memory.objects.filter(user_id="alice").exists() and LearnedPhrase.objects.filter(user_id="alice").exists()


@pytest.mark.django_db(transaction=True)
def test_two_proposers_of_a_shared_candidate_erased_at_once_leave_nothing_of_it(cbus, monkeypatch):
    """The second erasure waits for the first and sees its recount: the erasure of the last proposer deletes the
    candidate, even when both run at the same moment."""
    import threading
    import time

    from django.db import connection

    import learning.services.users as users

    api = make_client(["resolve", "feedback"], name="clicker")
    verb = _click(api, "every cbu there is", "alice")
    assert _click(api, "every cbu there is", "bob") == verb
    shared = LearningCandidate.objects.get(user_id__isnull=True, normalized="every cbu there is", suggested_output=verb)
    assert shared.occurrence_count == 2
    recounted, errors, recount = threading.Event(), {}, users._shared_candidates_recount

    def recount_then_wait(clicks, erased):  # alice's erasure has recounted the candidate; not committed yet
        recount(clicks, erased)
        recounted.set()
        time.sleep(1.5)

    monkeypatch.setattr(users, "_shared_candidates_recount", recount_then_wait)

    def erase_alice():
        try:
            _erase(user_id="alice")
        except Exception as exc:  # noqa: BLE001
            errors["alice"] = repr(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=erase_alice)
    thread.start()
    assert recounted.wait(20)
    monkeypatch.setattr(users, "_shared_candidates_recount", recount)
    _erase(user_id="bob")
    thread.join(30)
    assert errors == {}
    assert not LearningCandidate.objects.filter(pk=shared.pk).exists()
    assert not LearningCandidate.history.filter(id=shared.pk).exists()


def test_the_erasure_collects_the_ids_only_of_rows_the_logs_can_name(alice, monkeypatch):
    """The ids of a user's rows are read for the admin log only where it names a row of that kind, and for the
    candidates and lessons the review log names: a user with many resolution records never has them all read."""
    import privacy.services
    from learning.services.users import user_learning_erase
    from memories.services.users import user_memories_erase

    root = reviewer_user("root", superuser=True)
    phrase = LearnedPhrase.objects.filter(user_id="alice").first()
    LogEntry.objects.log_actions(user_id=root.pk, queryset=[phrase], action_flag=CHANGE, change_message=str(phrase))
    asked = []

    def learning_erase(**kw):
        asked.append(kw["ids_of"])
        return user_learning_erase(**kw)

    monkeypatch.setattr(privacy.services, "user_learning_erase", learning_erase)
    erased = _erase(user_id="alice", dry_run=True)
    assert asked == [{"learning.learnedphrase", "learning.learningcandidate", "memories.memoryquarantine"}]
    assert erased["admin_log_scrubbed"] == 1 and erased["rows"]["learning_resolutionrecord"] > 0

    with tenant_scope([tenant_default().pk]):
        learning = user_learning_erase(user_id="alice", dry_run=True, ids_of=asked[0])
        memories = user_memories_erase(user_id="alice", dry_run=True, ids_of=asked[0])
        every = user_learning_erase(user_id="alice", dry_run=True)
    assert set(learning["objects"]) == {"learning.LearnedPhrase", "learning.LearningCandidate"}
    assert set(memories["objects"]) == {"memories.MemoryQuarantine"}
    assert every["objects"]["learning.ResolutionRecord"] and set(every["objects"]) > set(learning["objects"])
    assert learning["objects"]["learning.LearnedPhrase"] == every["objects"]["learning.LearnedPhrase"]
    assert learning["rows"] == every["rows"]


def test_the_recount_takes_one_update_per_number_of_clicks(cbus, django_capture_on_commit_callbacks, django_assert_num_queries):
    """Shared candidates lose the erased user's clicks in one update per click count (the erasure locked them
    before, in key order, with its other candidates), each never below the clicks its signals still record."""
    from django.db import transaction

    from learning.services.users import _shared_candidates_recount

    api = make_client(["resolve", "feedback"], name="clicker")
    texts = ("every cbu there is", "cbus of mine please", "show the cbus", "all the cbus please")
    with django_capture_on_commit_callbacks(execute=True):
        for text in texts:
            _click(api, text, "alice")
            _click(api, text, "bob")
    shared = [LearningCandidate.objects.get(user_id__isnull=True, normalized=text) for text in texts]
    for candidate, count in zip(shared, (4, 5, 3, 6), strict=True):
        LearningCandidate.objects.filter(pk=candidate.pk).update(occurrence_count=count)
    clicks = {shared[0].pk: 1, shared[1].pk: 2, shared[2].pk: 2, shared[3].pk: 1}
    with transaction.atomic(), django_assert_num_queries(2):
        _shared_candidates_recount(clicks, [])
    counts = [LearningCandidate.objects.get(pk=c.pk).occurrence_count for c in shared]
    assert counts == [3, 3, 2, 5]  # 4 - 1, 5 - 2, 3 - 2 held at the two clicks its signals record, 6 - 1


def test_log_entries_written_with_texts_before_the_upgrade_lose_them(alice):
    """Entries of users' rows that an older admin wrote with their texts, rows deleted since included (out of an
    erasure's reach), are named by kind and key once the migration ran; other models' entries keep their names."""
    import importlib

    from django.apps import apps
    from django.contrib.admin.models import ADDITION
    from django.contrib.contenttypes.models import ContentType

    from learning.models import Verb

    migration = importlib.import_module("privacy.migrations.0001_admin_log_names_rows_by_kind_and_key")
    root = reviewer_user("root", superuser=True)
    phrase = LearnedPhrase.objects.filter(user_id="alice").first()
    verb = Verb.objects.first()
    inline = [{"changed": {"fields": ["Verb"]}}, {"added": {"name": "learning signal", "object": "alice: list all cbus"}}]
    kept = LogEntry.objects.create(
        user_id=root.pk,
        content_type=ContentType.objects.get_for_model(LearnedPhrase),
        object_id="987654",  # a row deleted since
        object_repr="alice: list all cbus → cbu.list",
        action_flag=CHANGE,
        change_message=json.dumps(inline),
    )
    free_text = LogEntry.objects.create(
        user_id=root.pk,
        content_type=ContentType.objects.get_for_model(MemoryQuarantine),
        object_id=str(phrase.pk),
        object_repr="How do I reach the bucket",
        action_flag=ADDITION,
        change_message="released: How do I reach the bucket",
    )
    other = LogEntry.objects.create(
        user_id=root.pk,
        content_type=ContentType.objects.get_for_model(Verb),
        object_id=str(verb.pk),
        object_repr=str(verb),
        action_flag=CHANGE,
        change_message="[]",
    )
    assert _named_anywhere_in_the_admin_log() != []

    migration.forwards(apps, None)

    assert _named_anywhere_in_the_admin_log() == []
    kept.refresh_from_db()
    assert kept.object_repr == "learned phrase #987654"
    assert json.loads(kept.change_message) == [
        {"changed": {"fields": ["Verb"]}},
        {"added": {"name": "learning signal", "object": "learning signal"}},
    ]
    free_text.refresh_from_db()
    assert free_text.object_repr.endswith(f"#{phrase.pk}") and free_text.change_message == ""
    other.refresh_from_db()
    assert other.object_repr == str(verb) and other.change_message == "[]"
