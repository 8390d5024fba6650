"""Feedback API inputs: a filter a list does not have, a parameter given twice, an execution whose two confidences
disagree."""

import pytest

from actions.models import Action, AutonomyLevel
from feedback.models import Execution
from tests.conftest import make_client


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
