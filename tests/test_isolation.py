"""Object-level authorisation across endpoints: two agents, two end users, data in every area.

Neither agent nor user can read, list, count, change or infer the other's
objects (404, not 403); keys without the governance scope cannot govern.
"""

import pytest

from actions.models import Action
from feedback.models import FeedbackRecord, Proposal
from learning.models import DisambiguationRequest
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_VERBS, make_client

pytestmark = pytest.mark.django_db

LESSON = {
    "user_message": "How do I rotate the staging database credentials safely?",
    "assistant_message": "Use the vault rotate command for the staging role, then restart the workers so they pick up the new lease.",
    "meta": {"type": "procedure", "topic": "credential rotation"},
}


@pytest.fixture
def world(db):
    verb_catalogue_load(entries=CBU_VERBS)
    a = make_client(["resolve", "feedback"], name="agent-a")
    b = make_client(["resolve", "feedback"], name="agent-b")
    gov_b = make_client(["resolve", "feedback", "governance"], name="agent-b-reviewer")
    # Agent A, user alice: a proposal, an execution, feedback, an open disambiguation and a memory.
    Action.objects.update_or_create(name="email.send", defaults={"autonomy_level": 2})
    proposal = a.post(
        "/api/v1/proposals",
        {"action": "email.send", "proposed_action": {"to": "x@example.com"}, "reasoning": {"confidence": 0.9}},
        format="json",
    ).json()
    execution = a.post(
        "/api/v1/executions",
        {
            "action": "email.send",
            "params": {"to": "x@example.com"},
            "reasoning": {"why": "asked"},
            "confidence": 0.9,
            "success": True,
        },
        format="json",
    )
    assert execution.status_code == 201, execution.content
    override = a.post(
        "/api/v1/overrides",
        {"action": "email.send", "original_action": {"to": "x"}, "corrected_action": {"to": "y"}, "explanation": "wrong address"},
        format="json",
    )
    assert override.status_code in (200, 201), override.content
    resolved = a.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    assert resolved["outcome"] == "ambiguous", resolved
    observed = a.post("/api/v1/memories/observe", {"user_id": "alice", **LESSON}, format="json").json()
    assert observed["decision"] == "saved", observed
    return {
        "a": a,
        "b": b,
        "gov_b": gov_b,
        "proposal": proposal["id"],
        "execution": execution.json()["id"],
        "request_id": resolved["request_id"],
        "options": [o["verb"] for o in resolved["options"]],
        "memory": observed["memory_id"],
    }


def test_agent_b_cannot_read_list_count_or_change_agent_a_objects(world):
    b = world["b"]
    assert b.get(f"/api/v1/proposals/{world['proposal']}").status_code == 404
    assert b.get(f"/api/v1/executions/{world['execution']}").status_code == 404
    for path in ["/api/v1/proposals", "/api/v1/executions", "/api/v1/feedback-records", "/api/v1/mistake-patterns"]:
        body = b.get(path).json()
        items = body["results"] if isinstance(body, dict) else body
        assert items == [], (path, body)
        if isinstance(body, dict) and "count" in body:
            assert body["count"] == 0
    assert b.post("/api/v1/outcomes", {"proposal": world["proposal"], "success": True}, format="json").status_code in (400, 404)
    # unknown and foreign ids answer the same way
    assert b.get("/api/v1/proposals/999999").status_code == 404
    assert Proposal.objects.get(pk=world["proposal"]).status == "pending"


def test_agent_b_cannot_answer_agent_a_disambiguation(world):
    b, verb = world["b"], world["options"][0]
    r = b.post(f"/api/v1/disambiguations/{world['request_id']}/select", {"selected_verb": verb}, format="json")
    assert r.status_code == 404
    r = b.post(f"/api/v1/disambiguations/{world['request_id']}/abandon", {"reason": "timeout"}, format="json")
    assert r.status_code == 404
    assert DisambiguationRequest.objects.get(request_id=world["request_id"]).status == "open"


def test_user_bob_cannot_answer_alice_disambiguation(world):
    a, verb = world["a"], world["options"][0]
    r = a.post(f"/api/v1/disambiguations/{world['request_id']}/select", {"selected_verb": verb, "user_id": "bob"}, format="json")
    assert r.status_code == 404
    assert DisambiguationRequest.objects.get(request_id=world["request_id"]).status == "open"


def test_user_bob_sees_none_of_alice_memories(world):
    a = world["a"]
    r = a.post("/api/v1/memories/retrieve", {"user_id": "bob", "query": "rotate staging database credentials"}, format="json")
    assert r.status_code == 200 and r.json()["items"] == []
    r = a.post("/api/v1/memories/search", {"user_id": "bob", "query": "vault rotate"}, format="json")
    assert r.status_code == 200
    assert all(item["id"] != world["memory"] for item in r.json().get("items", r.json().get("results", [])))
    r = a.post(
        "/api/v1/memories/outcome", {"user_id": "bob", "memory_ids": [world["memory"]], "outcome": "success"}, format="json"
    )
    assert r.status_code == 404
    r = a.post("/api/v1/memories/retrieve", {"user_id": "alice", "query": "rotate staging database credentials"}, format="json")
    assert [i["id"] for i in r.json()["items"]] == [world["memory"]]


def test_keys_without_governance_cannot_govern(world):
    b = world["b"]
    for path, body in [
        (f"/api/v1/proposals/{world['proposal']}/approve", {}),
        (f"/api/v1/proposals/{world['proposal']}/reject", {"review_notes": "no"}),
        (f"/api/v1/executions/{world['execution']}/review", {"outcome": "incorrect"}),
        ("/api/v1/learning/candidates/1/approve", {}),
        ("/api/v1/blocklist", {"phrase": "x", "verb": "cbu.list", "reason": "r", "scope": "global"}),
        ("/api/v1/learning/import", {"format": "json", "content": "[]", "scope": "global"}),
        ("/api/v1/autonomy/transitions/1/approve", {}),
    ]:
        assert b.post(path, body, format="json").status_code == 403, path
    for path in ["/api/v1/learning/candidates", "/api/v1/learning/stats", "/api/v1/autonomy/transitions"]:
        assert b.get(path).status_code == 403, path
    assert Proposal.objects.get(pk=world["proposal"]).status == "pending"
    assert FeedbackRecord.objects.filter(feedback_type="rejection").count() == 0


def test_governance_key_reviews_but_never_its_own_agents_work(world):
    gov_b = world["gov_b"]
    own = gov_b.post(
        "/api/v1/proposals",
        {"action": "email.send", "proposed_action": {"to": "z@example.com"}, "reasoning": {"confidence": 0.5}},
        format="json",
    ).json()
    assert gov_b.post(f"/api/v1/proposals/{own['id']}/approve", {}, format="json").status_code == 403
    r = gov_b.post(f"/api/v1/proposals/{world['proposal']}/reject", {"review_notes": "wrong recipient"}, format="json")
    assert r.status_code == 200, r.content
    assert FeedbackRecord.objects.filter(proposal_id=world["proposal"], feedback_type="rejection").count() == 1
