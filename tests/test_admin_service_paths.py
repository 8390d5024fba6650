"""The admin's forms change only what no service owns: who proposed a candidate, a phrase's state and origin, whose
private evidence a row is, a verb's name, a tenant's slug, a block's expiry and a memory's agent are fixed there;
a quarantine preview with a secret, pattern notes over the limit and invisible agent names are errors on the page;
candidates are rejected and profiles retired, not deleted; a change page writes only what its form changed, so it never
puts back what it read over what a service wrote meanwhile."""

import pytest

from agents.models import Agent, Scope
from feedback.models import MistakePattern
from feedback.services.mistakes import mistake_patterns_detect
from learning.models import FittedResolutionProfile, LearningCandidate, PhraseBlock, PhraseEvidence, Verb
from learning.services.blocks import phrase_block_add
from learning.services.candidates import candidate_record
from learning.services.phrases import learned_phrase_upsert
from memories.models import MemoryQuarantine
from tenants.context import acting_agent
from tenants.models import Tenant
from tenants.selectors import tenant_default
from tests.conftest import make_client, make_memory, reject_n

pytestmark = pytest.mark.django_db


def test_a_candidates_proposer_stays_so_it_still_cannot_approve_its_own(catalogue, su):
    gov = make_client([s.value for s in Scope], name="gov-bot")
    with acting_agent(gov.agent):
        cand = candidate_record(
            input_pattern="spin up a fresh unit", suggested_output="cbu.create", user_id=None, source="test", confidence=0.6
        )
    su.post(f"/admin/learning/learningcandidate/{cand.pk}/change/", {"proposed_by_agent": "", "seen_by_agents": ""})
    cand.refresh_from_db()
    assert (cand.proposed_by_agent_id, cand.seen_by_agents) == (gov.agent.pk, [gov.agent.pk])
    assert gov.post(f"/api/v1/learning/candidates/{cand.pk}/approve", {}, format="json").status_code == 403
    assert su.post(f"/admin/learning/learningcandidate/{cand.pk}/delete/", {"post": "yes"}).status_code == 403
    assert LearningCandidate.objects.filter(pk=cand.pk).exists()


def test_a_learned_phrase_is_ended_by_revert_not_by_its_form(catalogue, su):
    row = learned_phrase_upsert(phrase="show the units", verb=catalogue["cbu.list"])
    form = {"confidence": "0.2", "occurrence_count": "9", "source": "correction", "agent": ""}  # is_active unticked
    su.post(f"/admin/learning/learnedphrase/{row.pk}/change/", form)
    row.refresh_from_db()
    assert (row.is_active, row.source, row.confidence, row.occurrence_count) == (True, "manual", 1.0, 1)


def test_private_evidence_stays_with_its_agent(catalogue, su):
    own, other = Agent.objects.create(name="private-a", private_user_data=True), Agent.objects.create(name="shared-b")
    row = PhraseEvidence.objects.create(
        user_id="alice", phrase="x y", normalized="x y", verb="cbu.list", negative=1.0, private_agent=own
    )
    PhraseEvidence.objects.create(user_id="alice", phrase="x y", normalized="x y", verb="cbu.list", negative=2.0)
    for moved in (str(other.pk), ""):  # to another agent, or onto the shared row's key
        assert su.post(f"/admin/learning/phraseevidence/{row.pk}/change/", {"private_agent": moved}).status_code == 302
        row.refresh_from_db()
        assert row.private_agent_id == own.pk


def test_a_verbs_name_and_a_tenants_slug_are_fixed_once_they_exist(catalogue, su):
    verb = catalogue["cbu.delete"]
    form = {"name": "cbu.remove", "domain": "cbu", "is_active": "on", "phrases-TOTAL_FORMS": "0", "phrases-INITIAL_FORMS": "0"}
    assert su.post(f"/admin/learning/verb/{verb.pk}/change/", form).status_code == 302
    assert Verb.objects.filter(name="cbu.delete").exists() and not Verb.objects.filter(name="cbu.remove").exists()
    default = tenant_default()
    form = {"slug": "renamed", "name": "Default", "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}
    assert su.post(f"/admin/tenants/tenant/{default.pk}/change/", form).status_code == 302
    assert Tenant.objects.get(pk=default.pk).slug == "default" and tenant_default() == default


def test_a_blocks_expiry_is_ended_by_revert_not_by_its_form(catalogue, su):
    block, _ = phrase_block_add(phrase="wipe everything", verb_name="cbu.delete", reason="dangerous")
    form = {"reason": "still dangerous", "expires_at_0": "2020-01-01", "expires_at_1": "00:00:00"}
    assert su.post(f"/admin/learning/phraseblock/{block.pk}/change/", form).status_code == 302
    block.refresh_from_db()
    assert block.expires_at is None and block.reason == "still dangerous"
    assert PhraseBlock.objects.count() == 1


def test_a_quarantine_preview_with_a_secret_is_refused(su):
    item = MemoryQuarantine.objects.create(
        user_id="alice", reason="secret", finding_kinds=["password"], redacted_preview="The db password is [REDACTED:password]"
    )
    page = su.post(
        f"/admin/memories/memoryquarantine/{item.pk}/change/", {"redacted_preview": "The db password is Hunter2-Sup3rS3cret!"}
    )
    assert page.status_code == 200 and "This holds a secret" in page.content.decode()
    item.refresh_from_db()
    assert "Hunter2" not in item.redacted_preview
    clean = "The db password is kept in the team vault."
    assert su.post(f"/admin/memories/memoryquarantine/{item.pk}/change/", {"redacted_preview": clean}).status_code == 302
    item.refresh_from_db()
    assert item.redacted_preview == clean


def test_a_memorys_agent_is_fixed(su):
    memory = make_memory()
    other = Agent.objects.create(name="someone-else")
    su.post(f"/admin/memories/memory/{memory.pk}/change/", {"agent": str(other.pk)})
    memory.refresh_from_db()
    assert memory.agent_id != other.pk


def test_pattern_notes_over_the_limit_and_a_hand_set_mitigation_are_errors_on_the_page(agent, su):
    reject_n(agent, 3)
    mistake_patterns_detect()
    pattern = MistakePattern.objects.get()
    url = f"/admin/feedback/mistakepattern/{pattern.pk}/change/"
    page = su.post(url, {"status": "resolved", "resolution_notes": "x" * 6000})
    assert page.status_code == 200 and "at most 5000 characters" in page.content.decode()
    page = su.post(url, {"status": "mitigated", "resolution_notes": ""})
    assert page.status_code == 200 and "Select a valid choice" in page.content.decode()
    assert su.post(url, {"status": "resolved", "resolution_notes": "fixed upstream"}).status_code == 302
    pattern.refresh_from_db()
    assert (pattern.status, pattern.resolution_notes) == ("resolved", "fixed upstream")


@pytest.mark.parametrize("name", ["\u200b", "bad\x07bell"])
def test_an_agent_name_the_key_service_refuses_is_an_error_on_the_page(su, name):
    form = {"name": name, "description": "", "is_active": "on", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"}
    page = su.post("/admin/agents/agent/add/", form)
    assert page.status_code == 200 and "Agent name must" in page.content.decode()
    assert not Agent.objects.filter(name=name).exists()


def test_a_profile_is_retired_not_deleted(su):
    assert su.get("/admin/learning/fittedresolutionprofile/1/delete/").status_code in (403, 302)
    assert "delete_selected" not in su.get("/admin/learning/fittedresolutionprofile/").content.decode()
    assert not FittedResolutionProfile.objects.exists()


def _meanwhile(monkeypatch, model, write):
    """Run ``write`` (a service, committing as another request would) after the change page read its row and before
    it saves it."""
    from django.contrib import admin

    model_admin = type(admin.site._registry[model])
    read_then_saved = model_admin.save_form

    def save_form(self, request, form, change):
        write()
        return read_then_saved(self, request, form, change)

    monkeypatch.setattr(model_admin, "save_form", save_form)


def test_saving_a_candidates_page_keeps_what_was_counted_and_decided_meanwhile(catalogue, su, monkeypatch):
    """Every field of the page is read only: a save writes nothing, so it cannot put back the count or the pending
    state it read over clicks counted and an approval taken while it was open."""
    from learning.models import LearnedPhrase
    from learning.services.candidates import candidate_approve

    def record():
        return candidate_record(
            input_pattern="wipe my units", suggested_output="cbu.delete", user_id=None, source="t", confidence=0.5
        )

    cand = record()
    history = cand.history.count()
    _meanwhile(monkeypatch, LearningCandidate, lambda: ([record() for _ in range(3)], candidate_approve(candidate=cand)))
    assert su.post(f"/admin/learning/learningcandidate/{cand.pk}/change/", {"_save": "Save"}).status_code == 302
    cand.refresh_from_db()
    assert (cand.occurrence_count, cand.status) == (4, "applied") and cand.reviewed_at is not None
    assert LearnedPhrase.objects.filter(normalized="wipe my units", is_active=True).exists()
    assert cand.history.count() == history + 4  # the three counts and the approval: no row for the empty save


def test_editing_a_blocks_reason_keeps_it_as_long_as_a_service_made_it_meanwhile(catalogue, su, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    block, _ = phrase_block_add(
        phrase="wipe it", verb_name="cbu.delete", reason="r", expires_at=timezone.now() + timedelta(days=1)
    )
    _meanwhile(
        monkeypatch, PhraseBlock, lambda: phrase_block_add(phrase="wipe it", verb_name="cbu.delete", reason="", expires_at=None)
    )
    assert su.post(f"/admin/learning/phraseblock/{block.pk}/change/", {"reason": "edited reason"}).status_code == 302
    block.refresh_from_db()
    assert (block.reason, block.expires_at) == ("edited reason", None)


def test_saving_a_memorys_page_keeps_the_hits_counted_meanwhile(su, monkeypatch):
    from django.db.models import F

    from memories.models import Memory

    memory = make_memory()
    _meanwhile(
        monkeypatch, Memory, lambda: Memory.objects.filter(pk=memory.pk).update(hits=F("hits") + 5, streak=F("streak") + 5)
    )
    inline = {"write_decisions-TOTAL_FORMS": "0", "write_decisions-INITIAL_FORMS": "0"}
    assert su.post(f"/admin/memories/memory/{memory.pk}/change/", {"_save": "Save", **inline}).status_code == 302
    memory.refresh_from_db()
    assert (memory.hits, memory.streak) == (5, 5)


def test_every_change_page_saves_through_a_service_or_only_what_its_form_changed(rf):
    """Django's own save_model writes the whole row: no change page a superuser can save uses it."""
    from django.contrib import admin
    from django.contrib.auth import get_user_model

    request = rf.post("/")
    request.user = get_user_model()(is_superuser=True, is_staff=True, is_active=True)
    from common.admin import SaveChangedOnly

    through_a_service = {"Proposal", "Execution", "MistakePattern", "ApiKey"}  # their save_model calls a service only
    full_row = [
        model.__name__
        for model, model_admin in admin.site._registry.items()
        if model_admin.has_change_permission(request)
        and not isinstance(model_admin, SaveChangedOnly)
        and model.__name__ not in through_a_service
    ]
    assert full_row == []
    for model, model_admin in admin.site._registry.items():
        if model.__name__ in through_a_service:
            assert type(model_admin).save_model is not admin.ModelAdmin.save_model, model.__name__


def test_editing_a_persons_name_keeps_the_password_they_changed_meanwhile(su, monkeypatch):
    from django.contrib.auth import get_user_model

    User = get_user_model()
    person = User.objects.create_user("pat", password="old-pass-1234")

    def change_password():
        fresh = User.objects.get(pk=person.pk)
        fresh.set_password("new-pass-5678")
        fresh.save(update_fields=["password"])

    _meanwhile(monkeypatch, User, change_password)
    form = {"username": "pat", "first_name": "Pat", "last_name": "", "email": "", "is_active": "on"}
    answer = su.post(f"/admin/auth/user/{person.pk}/change/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    person.refresh_from_db()
    assert person.first_name == "Pat" and person.check_password("new-pass-5678")


def _as_shown(model, obj, **edits) -> dict:
    """The change page's form as a person would post it: each field's value as the page showed it, the hidden copy of
    that value beside it (``initial-<name>``), and ``edits`` typed over the shown values."""
    from django.contrib import admin
    from django.test import RequestFactory

    from tests.conftest import reviewer_user

    request = RequestFactory().get("/")
    request.user = reviewer_user("shown", superuser=True)
    form = admin.site._registry[model].get_form(request, obj, change=True)(instance=obj)
    data = {}
    for bound in form:
        value = bound.value()
        shown = "on" if value is True else "" if value in (None, False) else str(value)
        data[bound.html_initial_name] = shown
        if value is not False:
            data[bound.html_name] = shown
    for name, value in edits.items():
        data[name] = value
    return data


def test_an_edit_keeps_a_shown_field_a_service_changed_while_the_page_was_open(su):
    """The page showed the alias's confidence; an approval raised it while the page was open; the person only renamed
    the canonical name: the confidence stays the approval's (the form compares with what the page showed)."""
    from learning.models import EntityAlias

    alias = EntityAlias.objects.create(alias="the big unit", normalized="the big unit", canonical_name="cbu-1", confidence=0.5)
    posted = _as_shown(EntityAlias, alias, canonical_name="cbu-one")
    EntityAlias.objects.filter(pk=alias.pk).update(confidence=0.95, occurrence_count=3)  # meanwhile, as an approval
    assert su.post(f"/admin/learning/entityalias/{alias.pk}/change/", posted).status_code == 302
    alias.refresh_from_db()
    assert (alias.canonical_name, alias.confidence, alias.occurrence_count) == ("cbu-one", 0.95, 3)
    assert alias.history.first().confidence == 0.95  # the history row records what is stored, not what was read
