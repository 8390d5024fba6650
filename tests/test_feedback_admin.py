"""Feedback admin: reviewer screens call the services, so admin forms and bulk actions write feedback records too."""

import pytest
from django.contrib.auth.models import User

from actions.models import Action, AutonomyLevel
from autonomy.models import Episode
from autonomy.services import autonomy_cycle_run
from feedback.models import CorrectionRule, FeedbackRecord, MistakePattern, Proposal
from feedback.services.reviews import Reviewer, execution_create, proposal_approve, proposal_create, proposal_reject
from feedback.services.rules import correction_rules_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    user = User.objects.create_superuser("boss", "boss@example.com", "pw-1234-xyz")
    client.force_login(user)
    client.user = user
    return client


def propose(agent, **action):
    return proposal_create(
        agent=agent, action="email.send", proposed_action=action or {"to": "ceo"}, reasoning={"confidence": 0.9}
    )


def test_proposal_queue_reject_with_notes_and_modify_with_validation(admin_client, agent):
    p1, p2 = propose(agent), propose(agent)
    assert admin_client.get("/admin/feedback/proposal/?status__exact=pending").status_code == 200
    page = admin_client.get(f"/admin/feedback/proposal/{p1.pk}/change/")
    assert page.status_code == 200 and "Modified action" in page.content.decode()
    r = admin_client.post(
        f"/admin/feedback/proposal/{p1.pk}/change/",
        {"decision": "reject", "notes": "not the CEO", "new_action": "", "category": "recipient"},
    )
    assert r.status_code == 302
    rec = FeedbackRecord.objects.get()
    assert (rec.feedback_type, rec.source, rec.created_by, rec.human_explanation) == (
        "rejection",
        "admin",
        admin_client.user,
        "not the CEO",
    )
    # invalid JSON and a non-object are form errors: nothing changes
    for bad in ("{oops", "[1, 2]"):
        r = admin_client.post(
            f"/admin/feedback/proposal/{p2.pk}/change/", {"decision": "modify", "notes": "", "new_action": bad, "category": ""}
        )
        assert r.status_code == 200 and r.context["adminform"].form.errors
    # deciding a proposal that is no longer pending is a form error, not a crash
    r = admin_client.post(
        f"/admin/feedback/proposal/{p1.pk}/change/", {"decision": "approve", "notes": "", "new_action": "", "category": ""}
    )
    assert r.status_code == 200
    r = admin_client.post(
        f"/admin/feedback/proposal/{p2.pk}/change/",
        {"decision": "modify", "notes": "cfo instead", "new_action": '{"to": "cfo"}', "category": ""},
    )
    assert r.status_code == 302
    p2.refresh_from_db()
    assert p2.status == "modified" and p2.modified_action == {"to": "cfo"}
    assert FeedbackRecord.objects.get(proposal=p2).correction_delta["changed"] == {"to": {"from": "ceo", "to": "cfo"}}


def test_bulk_actions_write_one_record_each(admin_client, agent):
    ps = [propose(agent) for _ in range(3)]
    proposal_approve(proposal=ps[0], reviewer=Reviewer())
    selected = {"action": "reject_selected", "_selected_action": [p.pk for p in ps]}
    page = admin_client.post("/admin/feedback/proposal/", selected)
    assert page.status_code == 200 and 'id="changes"' in page.content.decode()  # a confirmation listing each
    assert page.content.decode().count('class="change"') == 3
    no_reason = admin_client.post("/admin/feedback/proposal/", {**selected, "post": "yes", "category": ""})
    assert "Choose a reason" in no_reason.content.decode()
    assert not FeedbackRecord.objects.exists()
    r = admin_client.post("/admin/feedback/proposal/", {**selected, "post": "yes", "category": "wrong_target", "notes": "no"})
    assert r.status_code == 302
    records = FeedbackRecord.objects.filter(source="admin_bulk", feedback_type="rejection")
    assert records.count() == 2 and set(records.values_list("mistake_category", flat=True)) == {"wrong_target"}
    assert Proposal.objects.get(pk=ps[0].pk).status == "approved"  # refused, reported, untouched


def test_execution_review_queue(admin_client, agent):
    Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.AUTONOMOUS)
    es = [
        execution_create(agent=agent, action="email.send", params={"to": "x"}, reasoning={"confidence": 0.8}, success=True)
        for _ in range(3)
    ]
    assert admin_client.get("/admin/feedback/execution/?review=unreviewed").status_code == 200
    r = admin_client.post(
        f"/admin/feedback/execution/{es[0].pk}/change/",
        {"outcome": "incorrect", "notes": "wrong person", "corrected": '{"to": "y"}', "category": ""},
    )
    assert r.status_code == 302
    r = admin_client.post("/admin/feedback/execution/", {"action": "mark_correct", "_selected_action": [e.pk for e in es]})
    assert r.status_code == 302
    types = sorted(FeedbackRecord.objects.values_list("feedback_type", "source"))
    assert types == [("execution_correct", "admin_bulk"), ("execution_correct", "admin_bulk"), ("execution_incorrect", "admin")]


def test_records_patterns_rules_and_episodes_screens(admin_client, agent):
    for _ in range(3):
        proposal_reject(proposal=propose(agent), reviewer=Reviewer(), notes="never email the CEO")
    episode = autonomy_cycle_run(agent_id=agent.pk)
    r = admin_client.get(f"/admin/feedback/feedbackrecord/?agent__id__exact={agent.pk}&feedback_type__exact=rejection")
    assert r.status_code == 200 and r.context["cl"].result_count == 3
    pattern = MistakePattern.objects.get()
    page = admin_client.get(f"/admin/feedback/mistakepattern/{pattern.pk}/change/")
    assert page.status_code == 200 and "3 record(s)" in page.content.decode()
    r = admin_client.post(
        f"/admin/feedback/mistakepattern/{pattern.pk}/change/", {"status": "dismissed", "resolution_notes": "fine after all"}
    )
    assert r.status_code == 302
    pattern.refresh_from_db()
    assert pattern.status == "dismissed" and pattern.resolved_by == admin_client.user
    rule = CorrectionRule.objects.get()
    listing = admin_client.get("/admin/feedback/correctionrule/")
    assert listing.status_code == 200 and "Deactivate" in listing.content.decode()
    r = admin_client.post(f"/admin/feedback/correctionrule/{rule.pk}/deactivate/")
    assert r.status_code == 302
    rule.refresh_from_db()
    assert rule.status == "inactive" and rule.deactivated_by == admin_client.user
    assert admin_client.get(f"/admin/feedback/correctionrule/{rule.pk}/history/").status_code == 200
    page = admin_client.get(f"/admin/autonomy/episode/{episode.pk}/change/")
    assert page.status_code == 200 and "rule_created" in page.content.decode()
    assert admin_client.get("/admin/autonomy/episode/").status_code == 200
    assert admin_client.get("/admin/actions/action/").status_code == 200
    assert correction_rules_create() == []
    assert Episode.objects.count() == 1
