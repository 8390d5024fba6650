"""Feedback API: list filters a list does not have, parameters given twice, an execution whose two confidences
disagree, and concurrent writers of proposals and outcomes."""

import pytest
from rest_framework.test import APIClient

from actions.models import Action, AutonomyLevel
from feedback.models import Execution, FeedbackRecord
from tests.conftest import make_client
from tests.test_concurrency import run_concurrently


def _agent():
    return make_client(["resolve", "feedback"], name="agent-a")


@pytest.mark.django_db
def test_a_filter_the_list_does_not_have_is_refused_not_ignored():
    agent = _agent()
    for path in ("/api/v1/proposals", "/api/v1/executions"):
        r = agent.get(path, {"feedback_type": "rejection"})
        assert r.status_code == 400 and "feedback_type" in r.data["fields"], (path, r.data)
    for path in ("/api/v1/feedback-records", "/api/v1/mistake-patterns"):
        assert agent.get(path, {"feedback_type": "rejection"}).status_code == 200, path


@pytest.mark.django_db
def test_a_query_parameter_given_twice_is_refused_with_its_name():
    agent = _agent()
    r = agent.get("/api/v1/proposals?status=pending&status=approved")
    assert r.status_code == 400 and r.data["fields"] == {"status": ["Give this parameter once."]}
    assert agent.get("/api/v1/proposals?status=pending").status_code == 200


@pytest.mark.django_db
def test_an_execution_whose_reasoning_states_another_confidence_is_refused_and_nothing_is_stored():
    agent = _agent()
    Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.ACT_REVIEWED)
    body = {"action": "email.send", "params": {}, "reasoning": {"confidence": 0.9}, "confidence": 0.5, "success": True}
    r = agent.post("/api/v1/executions", body, format="json")
    assert r.status_code == 400 and "reasoning.confidence" in r.data["fields"] and Execution.objects.count() == 0
    r = agent.post("/api/v1/executions", {**body, "confidence": 0.9}, format="json")
    assert r.status_code == 201 and r.data["confidence"] == 0.9


def _client(auth):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=auth)
    return client


@pytest.mark.django_db(transaction=True)
def test_proposals_of_a_new_action_at_once_register_it_once_and_all_succeed():
    auth = _agent()._credentials["HTTP_AUTHORIZATION"]

    def propose(i):
        body = {"action": "brand.new", "proposed_action": {"i": i}, "reasoning": {"confidence": 0.5}}
        return _client(auth).post("/api/v1/proposals", body, format="json").status_code

    codes, errors, _ = run_concurrently(propose, 8)
    assert errors == [] and codes == [201] * 8
    assert Action.objects.filter(name="brand.new").count() == 1


@pytest.mark.django_db(transaction=True)
def test_outcomes_of_one_proposal_at_once_are_recorded_once():
    agent = _agent()
    governance = make_client(["resolve", "feedback", "governance"], name="gov")
    body = {"action": "email.send", "proposed_action": {"i": 1}, "reasoning": {"confidence": 0.5}}
    proposal = agent.post("/api/v1/proposals", body, format="json").data
    assert governance.post(f"/api/v1/proposals/{proposal['id']}/approve", {}, format="json").status_code == 200
    auth = agent._credentials["HTTP_AUTHORIZATION"]

    def report(i):
        outcome = {"proposal": proposal["id"], "success": bool(i % 2), "error": "" if i % 2 else "failed"}
        return _client(auth).post("/api/v1/outcomes", outcome, format="json").status_code

    codes, errors, _ = run_concurrently(report, 8)
    assert errors == [] and sorted(codes) == [200] + [409] * 7
    assert FeedbackRecord.objects.filter(proposal_id=proposal["id"]).count() <= 1
