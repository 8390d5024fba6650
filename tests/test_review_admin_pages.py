"""Decisions taken on the apps' own admin pages (bulk actions, change forms, one-click buttons) honour the inbox's
claims and are logged like the inbox's own, so the decision log and the progress figures count every decision."""

from datetime import timedelta

import pytest
from django.utils import timezone

from autonomy.models import AutonomyTransition
from feedback.models import CorrectionRule, Proposal
from learning.models import LearningCandidate
from memories.models import MemoryQuarantine
from review.models import Claim, Decision
from review.selectors import progress
from review.services import claim_take
from tests.conftest import reviewer_user
from tests.test_review_inbox import ALL_PERMS, mixed_inbox, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def inbox():
    return mixed_inbox()


def test_a_bulk_action_logs_one_decision_per_item_it_decided_and_drops_the_claims(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    transition = items["transition"]
    claim_take(kind="transition", object_id=transition.pk, tenant_id=transition.tenant_id, user=rita)  # her own
    client = signed_in(rita)
    selected = {"action": "reject_selected", "_selected_action": [transition.pk]}
    client.post("/admin/autonomy/autonomytransition/", selected)  # the confirmation page decides nothing
    assert not Decision.objects.exists()
    client.post("/admin/autonomy/autonomytransition/", {**selected, "post": "yes", "notes": "too early"})
    assert AutonomyTransition.objects.get(pk=transition.pk).status == "rejected"
    decision = Decision.objects.get()
    assert (decision.kind, decision.object_id, decision.verdict, decision.user) == ("transition", transition.pk, "reject", rita)
    assert decision.reason == "too early" and "stays at level 1" in decision.summary
    assert decision.tenant_id == transition.tenant_id
    assert not Claim.objects.exists()
    assert progress()["today"] == 1 and progress()["per_reviewer"][0]["user__username"] == "rita"


def test_an_item_another_reviewer_holds_is_refused_and_nothing_is_decided(inbox):
    _, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS, "change_correctionrule")
    rule = items["rule"]
    claim_take(kind="rule", object_id=rule.pk, tenant_id=rule.tenant_id, user=rita)
    response = signed_in(sam).post(
        "/admin/feedback/correctionrule/",
        {"action": "approve_selected", "_selected_action": [rule.pk], "post": "yes"},
        follow=True,
    )
    assert "another reviewer holds it in the inbox" in response.content.decode() and "held by rita" in response.content.decode()
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval"
    assert not Decision.objects.exists()
    # The one-click button is held to the same claim; once the claim expires it decides and is logged.
    signed_in(sam).post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/")
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval"
    Claim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    signed_in(sam).post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/")
    assert CorrectionRule.objects.get(pk=rule.pk).status == "inactive"
    assert list(Decision.objects.values_list("kind", "verdict", "user__username")) == [("rule", "reject", "sam")]


def test_a_change_form_decision_is_logged_with_its_notes_and_category(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS, superuser=True)
    proposal = items["proposal"]
    signed_in(rita).post(
        f"/admin/feedback/proposal/{proposal.pk}/change/",
        {"decision": "reject", "notes": "never email the CEO", "new_action": "", "category": "recipient"},
    )
    assert Proposal.objects.get(pk=proposal.pk).status == "rejected"
    decision = Decision.objects.get()
    assert (decision.kind, decision.verdict, decision.category, decision.reason) == (
        "proposal",
        "reject",
        "recipient",
        "never email the CEO",
    )


def test_only_items_that_were_waiting_and_were_decided_are_logged(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS, superuser=True)
    quarantine = items["quarantine"]
    other = MemoryQuarantine.objects.create(user_id="ben", reason="secret", redacted_preview="x", finding_kinds=["aws_key"])
    MemoryQuarantine.objects.filter(pk=other.pk).update(status="discarded")  # decided before: not logged again
    signed_in(rita).post(
        "/admin/memories/memoryquarantine/", {"action": "discard", "_selected_action": [quarantine.pk, other.pk]}
    )
    assert MemoryQuarantine.objects.get(pk=quarantine.pk).status == "discarded"
    assert list(Decision.objects.values_list("kind", "object_id", "verdict")) == [("quarantine", quarantine.pk, "reject")]


def test_a_bulk_approval_of_candidates_is_logged_as_approvals(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS, superuser=True)
    candidate = items["candidate"]
    signed_in(rita).post(
        "/admin/learning/learningcandidate/",
        {"action": "approve_selected", "_selected_action": [candidate.pk], "post": "yes", "acknowledged": "1"},
    )
    assert LearningCandidate.objects.get(pk=candidate.pk).status in ("approved", "applied")
    assert list(Decision.objects.values_list("kind", "verdict")) == [("candidate", "approve")]
