"""The admin's own decision pages decide inside the decided item's tenant, for a reviewer of several tenants (whose
scope holds them all) and a superuser (every tenant), as the review inbox does."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from learning.models import Verb
from learning.services.candidates import candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from memories.models import Memory, MemoryQuarantine, MemoryWriteDecision
from tenants.context import ALL, tenant_scope
from tenants.services import membership_add, tenant_create
from tests.conftest import CBU_CATALOGUE, make_memory

pytestmark = pytest.mark.django_db

RELEASE = "/admin/memories/memoryquarantine/"
LESSON = "Rotate the staging credentials with the vault command every week."


def _client(user):
    client = Client(raise_request_exception=False)  # a server error answered as a page (500), as in production
    client.force_login(user)
    return client


def _reviewer_of_two_tenants(*codenames):
    """acme, globex, and a staff user (not a superuser) who is a reviewer of both, with these permissions."""
    acme, globex = tenant_create(slug="acme", name="Acme"), tenant_create(slug="globex", name="Globex")
    user = get_user_model().objects.create_user("multi", password="a-long-test-password", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    membership_add(user=user, tenant=acme)
    membership_add(user=user, tenant=globex)
    return acme, globex, user


def _quarantined(tenant, *, user_id="ann", text=LESSON):
    with tenant_scope([tenant.pk]):
        return MemoryQuarantine.objects.create(
            user_id=user_id, reason="secret", redacted_preview=text, memory_type="pattern", topic="deploy"
        )


def _release(client, item):
    return client.post(RELEASE, {"action": "release", "_selected_action": [item.pk], "post": "yes"})


def test_a_reviewer_of_two_tenants_releases_a_quarantined_lesson_from_the_admin_without_a_500():
    """The new memory's tenant comes from the scope: with two tenants in it, the release must enter the item's."""
    acme, _globex, user = _reviewer_of_two_tenants("view_memoryquarantine", "change_memoryquarantine")
    item = _quarantined(acme)
    response = _release(_client(user), item)
    assert response.status_code == 302, response.status_code
    with tenant_scope([acme.pk]):
        item.refresh_from_db()
        assert item.status == "released"
        assert Memory.objects.get(pk=item.released_memory_id).tenant_id == acme.pk


def test_the_same_release_through_the_review_inbox_works_for_that_reviewer():
    """The inbox's path, the same item."""
    acme, _globex, user = _reviewer_of_two_tenants("view_memoryquarantine", "change_memoryquarantine")
    item = _quarantined(acme)
    response = _client(user).post(f"/admin/inbox/quarantine/{item.pk}/", {"action": "approve", "confirmed": "1"})
    assert response.status_code == 302
    with tenant_scope([acme.pk]):
        item.refresh_from_db()
        assert item.status == "released" and Memory.objects.get(pk=item.released_memory_id).tenant_id == acme.pk


def test_a_release_from_the_admin_never_dedupes_a_lesson_into_another_tenants_memory():
    """User ids are a tenant's own: globex's "ann" is not acme's, and her lesson is not a duplicate of acme's memory."""
    acme, globex, user = _reviewer_of_two_tenants("view_memoryquarantine", "change_memoryquarantine")
    with tenant_scope([acme.pk]):
        acme_memory = make_memory(user="ann", content=LESSON)
    item = _quarantined(globex)
    assert _release(_client(user), item).status_code == 302
    with tenant_scope(ALL):
        item.refresh_from_db()
        assert item.status == "released"
        assert not MemoryWriteDecision.objects.filter(memory=acme_memory).exists()
        assert item.released_memory_id != acme_memory.pk
        assert Memory.objects.get(pk=item.released_memory_id).tenant_id == globex.pk


def test_a_superusers_release_from_the_admin_stores_the_memory_in_the_items_tenant():
    """A superuser sees every tenant; the memory still goes to the item's, never to the default tenant."""
    _acme, globex, _user = _reviewer_of_two_tenants()
    root = get_user_model().objects.create_superuser("root", password="a-long-test-password")
    item = _quarantined(globex, user_id="gus", text="Globex deploys every Friday once the freeze window has ended.")
    assert _release(_client(root), item).status_code == 302
    with tenant_scope(ALL):
        item.refresh_from_db()
        assert item.status == "released"
        assert Memory.objects.get(pk=item.released_memory_id).tenant_id == globex.pk


def test_the_candidate_approval_preview_speaks_of_the_candidates_own_tenant_only():
    """The confirmation page names what approving changes in the candidate's tenant, not another tenant's phrase."""
    acme, globex, user = _reviewer_of_two_tenants("view_learningcandidate", "review_learningcandidate")
    with tenant_scope([acme.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
        candidate = candidate_record(
            input_pattern="wipe the unit", suggested_output="cbu.show", user_id=None, source="correction", confidence=0.6
        )
    with tenant_scope([globex.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
        learned_phrase_upsert(phrase="wipe the unit", verb=Verb.objects.get(name="cbu.delete"), user_id=None, source="import")
    page = _client(user).post(
        "/admin/learning/learningcandidate/", {"action": "approve_selected", "_selected_action": [candidate.pk]}
    )
    assert page.status_code == 200
    text = page.content.decode()
    assert "re-pointed from cbu.delete" not in text, re.findall(r"learned phrase[^<]*", text)
    assert "new learned phrase “wipe the unit” → cbu.show" in text
