"""Decisions taken on the apps' own admin pages (bulk actions, change forms, one-click buttons) honour the inbox's
claims and are logged like the inbox's own, so the decision log and the progress figures count every decision."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition
from common.api import ApplicationError
from feedback.models import CorrectionRule, Proposal
from learning.models import LearningCandidate
from memories.models import MemoryQuarantine
from review import admin as review_admin
from review import services as review_services
from review.models import Claim, Decision
from review.selectors import InboxFilters, next_item, progress
from review.services import claim_take, item_decide
from tests.conftest import reviewer_user
from tests.test_review_inbox import ALL_PERMS, mixed_inbox, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def inbox():
    return mixed_inbox()


def test_a_bulk_action_logs_one_decision_per_item_it_decided_and_drops_the_claims(one_day, inbox):
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


def test_a_staff_user_who_may_not_see_the_items_is_refused_without_learning_who_holds_them(inbox):
    _, items = inbox
    rita, nosy = reviewer_user("rita", *ALL_PERMS), reviewer_user("nosy")  # staff, no permission at all
    rule = items["rule"]
    claim_take(kind="rule", object_id=rule.pk, tenant_id=rule.tenant_id, user=rita)
    selected = {"action": "approve_selected", "_selected_action": [rule.pk], "post": "yes"}
    for response in (
        signed_in(nosy).post("/admin/feedback/correctionrule/", selected),
        signed_in(nosy).post(f"/admin/feedback/correctionrule/{rule.pk}/change/", {}),
    ):
        assert response.status_code == 403 and "rita" not in response.content.decode()
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval" and not Decision.objects.exists()


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


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_one_click_deactivate_of_a_held_rule_goes_back_to_the_list_and_says_why(inbox):
    _, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS, "change_correctionrule")
    rule = items["rule"]
    claim_take(kind="rule", object_id=rule.pk, tenant_id=rule.tenant_id, user=rita)
    response = signed_in(sam).post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/", follow=True)
    # Not a GET of the POST-only button (405): the rule list, with who holds the rule.
    assert response.status_code == 200
    assert response.redirect_chain == [("/admin/feedback/correctionrule/", 302)]
    assert any("held by rita" in m for m in _messages(response))
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval"


def test_a_bulk_refusal_says_that_nothing_of_the_selection_was_decided(inbox):
    agent, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    held = items["proposal"]
    free = Proposal.objects.create(agent=agent, action=held.action, proposed_action={}, reasoning={}, confidence=0.9)
    claim_take(kind="proposal", object_id=held.pk, tenant_id=held.tenant_id, user=rita)
    response = signed_in(sam).post(
        "/admin/feedback/proposal/", {"action": "approve_selected", "_selected_action": [held.pk, free.pk]}, follow=True
    )
    (message,) = _messages(response)
    assert message.startswith("Nothing was decided") and f"#{held.pk} held by rita" in message
    assert set(Proposal.objects.filter(pk__in=[held.pk, free.pk]).values_list("status", flat=True)) == {"pending"}


def test_a_viewer_cannot_release_or_discard_a_quarantined_lesson_from_the_admin(inbox):
    _, items = inbox
    viewer = reviewer_user("vic", "view_memoryquarantine")
    quarantine = items["quarantine"]
    client = signed_in(viewer)
    for action in ("discard", "release"):
        client.post("/admin/memories/memoryquarantine/", {"action": action, "_selected_action": [quarantine.pk], "post": "yes"})
    assert MemoryQuarantine.objects.get(pk=quarantine.pk).status == "pending"
    assert not Decision.objects.exists()
    # With the permission the inbox asks for, the same action decides and is logged.
    keeper = reviewer_user("kim", "view_memoryquarantine", "change_memoryquarantine")
    signed_in(keeper).post("/admin/memories/memoryquarantine/", {"action": "discard", "_selected_action": [quarantine.pk]})
    assert MemoryQuarantine.objects.get(pk=quarantine.pk).status == "discarded"
    assert list(Decision.objects.values_list("user__username", "verdict")) == [("kim", "reject")]


def test_select_all_over_a_filtered_list_is_held_only_by_claims_on_the_rows_it_lists(inbox):
    agent, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    listed = items["proposal"]
    elsewhere = Proposal.objects.create(
        agent=agent, action=Action.objects.create(name="crm.update"), proposed_action={}, reasoning={}, confidence=0.9
    )
    claim_take(kind="proposal", object_id=elsewhere.pk, tenant_id=elsewhere.tenant_id, user=rita)
    select_all = {"action": "approve_selected", "_selected_action": [listed.pk], "select_across": "1", "index": "0"}
    client = signed_in(sam)
    response = client.post(f"/admin/feedback/proposal/?action__id__exact={listed.action_id}", select_all, follow=True)
    assert not any("another reviewer" in m for m in _messages(response))
    assert Proposal.objects.get(pk=listed.pk).status == "approved"
    assert Proposal.objects.get(pk=elsewhere.pk).status == "pending"
    assert list(Decision.objects.values_list("object_id", "user__username")) == [(listed.pk, "sam")]
    # A select-all whose list shows the held proposal is refused.
    response = client.post("/admin/feedback/proposal/", select_all, follow=True)
    assert any(f"#{elsewhere.pk} held by rita" in m for m in _messages(response))
    assert Proposal.objects.get(pk=elsewhere.pk).status == "pending"


def test_a_selected_id_is_held_to_its_claim_however_the_admin_reads_it(inbox):
    _, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    proposal = items["proposal"]
    claim_take(kind="proposal", object_id=proposal.pk, tenant_id=proposal.tenant_id, user=rita)
    client = signed_in(sam)
    client.post("/admin/feedback/proposal/", {"action": "approve_selected", "_selected_action": [f" {proposal.pk}"]})
    client.post(f"/admin/feedback/proposal/%20{proposal.pk}/change/", {"decision": "approve", "notes": "", "new_action": ""})
    assert Proposal.objects.get(pk=proposal.pk).status == "pending"
    assert not Decision.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_inbox_decision_while_a_large_select_all_runs_is_logged_once(monkeypatch):
    _, items = mixed_inbox()
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    proposal = items["proposal"]
    monkeypatch.setattr(review_services, "ADMIN_LOCKS_MAX", 0)  # every selection counts as one too large to lock by id
    outcome = []

    def inbox_reject():
        try:
            item_decide(kind="proposal", object_id=proposal.pk, user=rita, verdict="reject", reason="no")
            outcome.append("rejected")
        except ApplicationError as exc:
            outcome.append(exc.code)
        finally:
            connection.close()

    inbox = threading.Thread(target=inbox_reject)
    items_waiting = review_admin.selectors.items_waiting

    def waiting_then_the_inbox_decides(**kwargs):  # rita confirms in the inbox while sam's bulk action runs
        waiting = items_waiting(**kwargs)
        inbox.start()
        inbox.join(timeout=2)
        return waiting

    monkeypatch.setattr(review_admin.selectors, "items_waiting", waiting_then_the_inbox_decides)
    signed_in(sam).post(
        "/admin/feedback/proposal/",
        {"action": "approve_selected", "_selected_action": [proposal.pk], "select_across": "1", "index": "0"},
    )
    inbox.join()
    status = Proposal.objects.get(pk=proposal.pk).status
    decisions = list(Decision.objects.filter(object_id=proposal.pk).values_list("user__username", "verdict"))
    assert (status, decisions, outcome) == ("approved", [("sam", "approve")], ["decided"])


def test_stopping_a_rule_in_its_admin_pages_needs_the_approvers_permission_as_in_the_inbox(inbox):
    _, items = inbox
    rule = items["rule"]
    editor = reviewer_user("editor", "view_correctionrule", "change_correctionrule")
    client = signed_in(editor)
    listing = client.get("/admin/feedback/correctionrule/")
    assert listing.status_code == 200
    assert f"/admin/feedback/correctionrule/{rule.pk}/deactivate/" not in listing.content.decode()
    assert "deactivate_selected" not in listing.content.decode()
    assert client.post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/").status_code == 403
    client.post("/admin/feedback/correctionrule/", {"action": "deactivate_selected", "_selected_action": [rule.pk]})
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval" and not Decision.objects.exists()
    approver = reviewer_user("approver", "view_correctionrule", "approve_correctionrule")
    page = signed_in(approver).get("/admin/feedback/correctionrule/").content.decode()
    assert f"/admin/feedback/correctionrule/{rule.pk}/deactivate/" in page and "deactivate_selected" in page
    assert signed_in(approver).post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/").status_code == 302
    assert CorrectionRule.objects.get(pk=rule.pk).status == "inactive"
    assert list(Decision.objects.values_list("kind", "verdict", "user__username")) == [("rule", "reject", "approver")]


def test_a_proposal_modified_on_its_change_form_is_logged_as_approved_with_what_changed(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS, "change_proposal")
    proposal = items["proposal"]
    response = signed_in(rita).post(
        f"/admin/feedback/proposal/{proposal.pk}/change/",
        {"decision": "modify", "notes": "to the CTO", "new_action": '{"to": "cto@x.io", "cc": "audit@x.io"}', "category": ""},
    )
    assert response.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).status == "modified"
    decision = Decision.objects.get()
    assert (decision.kind, decision.verdict, decision.user, decision.reason) == ("proposal", "approve", rita, "to the CTO")
    assert decision.summary == f"Proposal #{proposal.pk} ({proposal.action.name}) is approved as modified (changed: cc, to)."


def test_a_bulk_action_chosen_from_either_menu_honours_the_claim_and_is_logged_once():
    """A changelist has an action menu above and one below: Django runs ``getlist("action")[index]``, whichever menu
    the last ``action`` value came from."""
    _, items = mixed_inbox()
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    proposal = items["proposal"]
    claim_take(kind="proposal", object_id=proposal.pk, tenant_id=proposal.tenant_id, user=rita)
    chosen_above = {"action": ["approve_selected", ""], "index": "0", "_selected_action": [proposal.pk]}
    signed_in(sam).post("/admin/feedback/proposal/", chosen_above)
    assert Proposal.objects.get(pk=proposal.pk).status == "pending" and not Decision.objects.exists()
    signed_in(rita).post("/admin/feedback/proposal/", chosen_above)
    assert Proposal.objects.get(pk=proposal.pk).status != "pending"
    assert list(Decision.objects.values_list("object_id", "user__username")) == [(proposal.pk, "rita")]


def _pending_proposals(n: int) -> list:
    """``n`` proposals waiting for review, oldest first."""
    agent = Agent.objects.create(name="mailer")
    action = Action.objects.create(name="email.send", autonomy_level=1)
    return [
        Proposal.objects.create(agent=agent, action=action, proposed_action={"i": i}, reasoning={}, confidence=0.9)
        for i in range(n)
    ]


def test_next_item_reads_past_a_page_of_skipped_or_held_items(settings):
    settings.REVIEW_NEXT_LOOKAHEAD = 5
    proposals = _pending_proposals(12)
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    for p in proposals[6:11]:
        claim_take(kind="proposal", object_id=p.pk, tenant_id=p.tenant_id, user=sam)
    skipped = {("proposal", p.pk) for p in proposals[:6]}
    found = next_item(user=rita, filters=InboxFilters(), after=None, skip=skipped)
    assert (found.kind, found.pk) == ("proposal", proposals[11].pk)
    assert next_item(user=rita, filters=InboxFilters(), after=None, skip=skipped | {("proposal", proposals[11].pk)}) is None


def test_next_item_reads_a_window_that_doubles_so_its_queries_grow_with_the_log_of_the_items_passed_over(settings):
    """Passing over 5 items or 80 before the free one: the queries grow by a few windows, not by a page of queries
    for each page passed over (each of which read the queue from its start again)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.REVIEW_NEXT_LOOKAHEAD = 5
    proposals = _pending_proposals(81)
    rita = reviewer_user("rita", *ALL_PERMS)

    def queries_to_reach(n):
        skipped = {("proposal", p.pk) for p in proposals[:n]}
        with CaptureQueriesContext(connection) as done:
            found = next_item(user=rita, filters=InboxFilters(), after=None, skip=skipped)
        assert (found.kind, found.pk) == ("proposal", proposals[n].pk)
        return len(done.captured_queries)

    few, many = queries_to_reach(5), queries_to_reach(80)
    assert many <= few * 3, (few, many)  # windows of 5, 10, 20, 40, 80, 160 against 5, 10: before, 17 pages
    skipped = {("proposal", p.pk) for p in proposals}
    assert next_item(user=rita, filters=InboxFilters(), after=None, skip=skipped) is None


def test_inbox_pages_reach_a_bounded_depth_and_say_how_many_items_lie_beyond(settings, monkeypatch):
    """Page n reads n pages of each kind to merge them: pages stop at INBOX_DEEPEST_ITEMS items, a page number beyond
    shows the deepest page, and the page says how many items only a filter reaches."""
    from review import selectors

    monkeypatch.setattr(selectors, "INBOX_DEEPEST_ITEMS", 4)
    settings.REVIEW_PAGE_SIZE = 2
    _pending_proposals(7)
    client = signed_in(reviewer_user("rita", *ALL_PERMS))
    page = client.get("/admin/inbox/?page=9999").content.decode()
    assert "page 2 of 2" in page and "3 more than the pages reach" in page
    first = client.get("/admin/inbox/").content.decode()
    assert "page 1 of 2" in first and "3 more than the pages reach" in first
    monkeypatch.setattr(selectors, "INBOX_DEEPEST_ITEMS", 10_000)
    assert "more than the pages reach" not in client.get("/admin/inbox/").content.decode()
