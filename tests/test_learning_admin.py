"""Learning admin: the reviewer screens for learning candidates (review actions, confirmations, dashboard)."""

import pytest
from django.urls import reverse

from learning.models import LearnedPhrase, LearningCandidate, PhraseBlock
from learning.services.candidates import candidate_record
from tests.conftest import reviewer_user

CHANGELIST = "/admin/learning/learningcandidate/"


def make_user(name, *codenames, superuser=False):
    return reviewer_user(name, *codenames, superuser=superuser)


@pytest.fixture
def candidates(catalogue):
    a = candidate_record(
        input_pattern="onboard a fresh legal entity", suggested_output="cbu.create", user_id=None, source="test", confidence=0.6
    )
    b = candidate_record(
        input_pattern="remove a client business unit",
        suggested_output="cbu.delete",
        user_id="alice",
        source="test",
        confidence=0.6,
    )
    for _ in range(2):
        candidate_record(
            input_pattern="remove a client business unit",
            suggested_output="cbu.delete",
            user_id="alice",
            source="test",
            confidence=0.6,
        )
    return a, b


@pytest.fixture
def reviewer(db):
    return make_user(
        "rita", "view_learningcandidate", "change_learningcandidate", "review_learningcandidate", "view_learnedphrase"
    )


def test_plain_staff_sees_no_review_actions_and_cannot_approve(client, candidates):
    staff = make_user("sam", "view_learningcandidate", "change_learningcandidate")
    client.force_login(staff)
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert "approve_selected" not in html and "reject_selected" not in html
    a, b = candidates
    response = client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk], "post": "yes"})
    assert response.status_code in (200, 302)
    a.refresh_from_db()
    assert a.status == "pending"
    assert not LearnedPhrase.objects.exists()


def test_reviewer_sees_actions_pending_first(client, candidates, reviewer):
    a, b = candidates
    client.force_login(reviewer)
    html = client.get(CHANGELIST).content.decode()
    assert "approve_selected" in html and "reject_selected" in html
    # Pending first, then by occurrences: b (3) before a (1).
    assert html.index("remove a client business unit") < html.index("onboard a fresh legal entity")
    assert client.get(CHANGELIST + "?min_occurrences=2").content.decode().count("onboard a fresh legal entity") == 0
    assert client.get(CHANGELIST + "?q=onboard").content.decode().count("remove a client business unit") == 0


def test_approve_confirmation_then_apply_records_reviewer(client, candidates, reviewer):
    a, b = candidates
    client.force_login(reviewer)
    confirm = client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk]})
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "new learned phrase “onboard a fresh legal entity” → cbu.create (global), with its embedding" in html
    assert 'name="post" value="yes"' in html
    a.refresh_from_db()
    assert a.status == "pending"  # nothing changes before confirmation

    done = client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk], "post": "yes"}, follow=True)
    assert "Approved and applied 1 candidate" in done.content.decode()
    a.refresh_from_db()
    assert a.status == "applied" and a.reviewed_by == reviewer and a.reviewed_at is not None
    phrase = LearnedPhrase.objects.get(normalized="onboard a fresh legal entity")
    assert phrase.embedding is not None
    assert phrase.history.latest().history_user == reviewer
    assert a.history.latest().history_user == reviewer
    history_page = client.get(reverse("admin:learning_learningcandidate_history", args=[a.pk]))
    assert history_page.status_code == 200 and "rita" in history_page.content.decode()


def test_reject_confirmation_requires_reason_and_blocks(client, candidates, reviewer):
    a, b = candidates
    client.force_login(reviewer)
    page = client.post(CHANGELIST, {"action": "reject_selected", "_selected_action": [b.pk]})
    assert 'name="reason"' in page.content.decode() and "cbu.delete blocked for" in page.content.decode()
    no_reason = client.post(CHANGELIST, {"action": "reject_selected", "_selected_action": [b.pk], "post": "yes", "reason": ""})
    assert "A reason is required." in no_reason.content.decode()
    b.refresh_from_db()
    assert b.status == "pending"
    client.post(
        CHANGELIST,
        {"action": "reject_selected", "_selected_action": [b.pk], "post": "yes", "reason": "risky", "add_to_blocklist": "on"},
    )
    b.refresh_from_db()
    assert (b.status, b.review_reason, b.reviewed_by) == ("rejected", "risky", reviewer)
    block = PhraseBlock.objects.get(user_id="alice", verb__name="cbu.delete")
    assert block.history.latest().history_user == reviewer


def test_approving_a_rejected_candidate_in_admin_reports_error(client, candidates, reviewer):
    a, _ = candidates
    client.force_login(reviewer)
    client.post(CHANGELIST, {"action": "reject_selected", "_selected_action": [a.pk], "post": "yes", "reason": "no"})
    page = client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk]})
    assert "skipped: already rejected" in page.content.decode()
    done = client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk], "post": "yes"}, follow=True)
    assert "already rejected" in done.content.decode()
    assert not LearnedPhrase.objects.exists()


def test_admin_index_dashboard(client, candidates, reviewer):
    a, b = candidates
    client.force_login(reviewer)
    client.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [a.pk], "post": "yes"})
    # a user's own click applies itself: it never waits for a reviewer, so the dashboard counts what the inbox lists
    LearningCandidate.objects.create(
        input_pattern="my cbus", normalized="my cbus", suggested_output="cbu.list", user_id="alice", source="user_disambiguation"
    )
    html = client.get("/admin/").content.decode()
    assert 'id="learning-dashboard"' in html
    assert '<td class="pending-candidates">1</td>' in html
    assert '<td class="approved-this-week">1</td>' in html
    assert '<td class="active-learned-phrases">1</td>' in html
    assert '<td class="active-blocklist-entries">0</td>' in html
    top = html[html.index('id="top-pending"') :]
    assert "remove a client business unit" in top and "<td>3</td>" in top


def test_dashboard_hidden_without_candidate_permission(client, db):
    user = make_user("nobody")
    client.force_login(user)
    html = client.get("/admin/").content.decode()
    assert 'id="learning-dashboard"' not in html


def test_candidates_cannot_be_added_by_hand(client, reviewer):
    client.force_login(reviewer)
    assert client.get("/admin/learning/learningcandidate/add/").status_code == 403
    assert LearningCandidate.objects.count() == 0
