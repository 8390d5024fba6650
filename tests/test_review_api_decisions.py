"""Decisions taken through the API (REST and MCP) on items the review inbox shows follow the inbox's rules: an item
another reviewer holds is refused (409 ``claimed``) and nothing changes; a reviewer token's decision is logged as a
``Decision`` with its reason, and the claims on the item go; an agent key's decision is logged with the agent (no
reviewer), so the decision log shows every decision however it was taken."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import agent_key_create
from autonomy.models import AutonomyTransition
from feedback.models import Execution, Proposal
from learning.models import LearningCandidate
from review.models import Claim, Decision
from review.selectors import progress
from review.services import claim_take
from tests.conftest import make_client, reviewer_client, reviewer_user
from tests.test_mcp_policies import mcp_call
from tests.test_review_inbox import ALL_PERMS, mixed_inbox

pytestmark = pytest.mark.django_db


@pytest.fixture
def inbox():
    return mixed_inbox()[1]


def _hold(item, kind, user):
    return claim_take(kind=kind, object_id=item.pk, tenant_id=item.tenant_id, user=user)


def test_a_candidate_another_reviewer_holds_is_refused_to_an_agent_key_and_stays_pending(one_day, inbox):
    rita = reviewer_user("rita", *ALL_PERMS)
    candidate = inbox["candidate"]
    _hold(candidate, "candidate", rita)
    governor = make_client(["governance"], name="governor")
    answer = governor.post(f"/api/v1/learning/candidates/{candidate.pk}/approve", {}, format="json")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert body["code"] == "claimed" and body["held_by"] == "rita" and "id" in body["fields"]
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "pending"

    Claim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # her claim lapsed
    answer = governor.post(f"/api/v1/learning/candidates/{candidate.pk}/reject", {"reason": "not a cbu"}, format="json")
    assert answer.status_code == 200, answer.content
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "rejected"
    decision = Decision.objects.select_related("agent").get()  # an agent's key decided: logged with the agent
    assert (decision.kind, decision.object_id, decision.verdict) == ("candidate", candidate.pk, "reject")
    assert decision.user is None and decision.agent.name == "governor" and decision.decider == "agent governor"
    assert decision.reason == "not a cbu" and decision.tenant_id == candidate.tenant_id
    assert progress()["per_reviewer"] == [{"user__username": None, "agent__name": "governor", "week": 1, "today": 1}]

    again = governor.post(f"/api/v1/learning/candidates/{candidate.pk}/approve", {}, format="json")
    assert again.status_code == 409
    assert Decision.objects.count() == 1


def test_a_reviewer_tokens_decision_is_logged_with_its_reason_and_drops_the_claims(one_day, inbox):
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    as_rita, as_sam = reviewer_client(rita), reviewer_client(sam)
    transition = inbox["transition"]
    _hold(transition, "transition", rita)
    refused = as_sam.post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "claimed"
    assert AutonomyTransition.objects.get(pk=transition.pk).status == "proposed"

    answer = as_rita.post(  # her own claim does not stop her
        f"/api/v1/autonomy/transitions/{transition.pk}/reject", {"notes": "wait for a month of data"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    decision = Decision.objects.get()
    assert (decision.kind, decision.object_id, decision.verdict, decision.user) == ("transition", transition.pk, "reject", rita)
    assert decision.reason == "wait for a month of data" and decision.tenant_id == transition.tenant_id
    assert not Claim.objects.exists()
    assert progress()["today"] == 1

    again = as_rita.post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {}, format="json")
    assert again.status_code == 409  # decided already: the service refuses, and nothing more is logged
    assert Decision.objects.count() == 1


@pytest.mark.parametrize(
    "kind,path,body",
    [
        ("proposal", "/api/v1/proposals/{pk}/reject", {"review_notes": "never email the CEO", "mistake_category": "policy"}),
        ("proposal", "/api/v1/proposals/{pk}/approve", {"review_notes": "fine"}),
        ("proposal", "/api/v1/proposals/{pk}/modify", {"review_notes": "to the CTO", "modified_action": {"to": "cto@x.io"}}),
        ("execution", "/api/v1/executions/{pk}/review", {"outcome": "incorrect", "review_notes": "wrong env"}),
    ],
)
def test_proposals_and_executions_decided_through_the_api_follow_the_same_rules(inbox, kind, path, body):
    rita = reviewer_user("rita", *ALL_PERMS)
    governor = make_client(["governance"], name="governor")
    item = inbox[kind]
    model = {"proposal": Proposal, "execution": Execution}[kind]
    before = model.objects.filter(pk=item.pk).values().get()
    _hold(item, kind, rita)
    refused = governor.post(path.format(pk=item.pk), body, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "claimed", refused.content
    assert model.objects.filter(pk=item.pk).values().get() == before
    Claim.objects.all().delete()
    answer = governor.post(path.format(pk=item.pk), body, format="json")
    assert answer.status_code == 200, answer.content
    assert model.objects.filter(pk=item.pk).values().get() != before
    decision = Decision.objects.get()
    assert (decision.kind, decision.object_id, decision.user, decision.agent.name) == (kind, item.pk, None, "governor")
    assert decision.reason == body["review_notes"] and decision.category == body.get("mistake_category", "")


def test_an_mcp_governance_tool_honours_the_claim_too(inbox):
    rita = reviewer_user("rita", *ALL_PERMS)
    candidate = inbox["candidate"]
    _hold(candidate, "candidate", rita)
    _, raw = agent_key_create(agent_name="governor", scopes=["governance"])
    outcome = mcp_call("approve_learning_candidate", raw, {"candidate_id": candidate.pk})
    assert outcome.error is not None and outcome.error["code"] == "claimed" and outcome.error["http_status"] == 409
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "pending"
    Claim.objects.all().delete()
    outcome = mcp_call("reject_learning_candidate", raw, {"candidate_id": candidate.pk, "reason": "no"})
    assert outcome.error is None, outcome.error
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "rejected"
    assert Decision.objects.values_list("agent__name", "verdict", "reason").get() == ("governor", "reject", "no")


@pytest.mark.parametrize(
    "path,body",
    [
        ("/api/v1/proposals/{pk}/approve", {}),
        ("/api/v1/proposals/{pk}/reject", {"review_notes": "no"}),
        ("/api/v1/executions/{pk}/review", {"outcome": "correct"}),
        ("/api/v1/autonomy/transitions/{pk}/approve", {}),
        ("/api/v1/learning/candidates/{pk}/approve", {}),
    ],
)
def test_an_id_no_row_can_have_is_404_like_any_unknown_id(inbox, path, body):
    """The inbox's lock step runs before the view's own lookup: an id outside PostgreSQL's keys must reach it."""
    governor = make_client(["governance"], name="governor")
    rita = reviewer_client(reviewer_user("rita", *ALL_PERMS))
    person_only = "transitions" in path  # a person's decision; the others are an agent key's
    for client in (rita,) if person_only else (governor,):
        answer = client.post(path.format(pk=2**63), body, format="json")
        assert answer.status_code == 404, answer.content
        assert client.post(path.format(pk=2**63 - 1), body, format="json").status_code == 404
