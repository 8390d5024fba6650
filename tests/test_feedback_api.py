"""Feedback API: proposals, executions, outcomes, corrections, feedback records and the consult API."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from actions.models import Action, AutonomyLevel
from autonomy.models import CalibrationRecord
from feedback.models import Execution, FeedbackRecord, FeedbackType, MistakePattern, Proposal
from tests.conftest import make_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_a(db):
    return make_client(["resolve", "feedback"], name="agent-a")


@pytest.fixture
def agent_b(db):
    return make_client(["resolve", "feedback"], name="agent-b")


@pytest.fixture
def reviewer(db):
    return make_client(["resolve", "feedback", "governance"], name="review-tool")


def propose(client, action="email.send", confidence=0.8, **extra):
    body = {
        "action": action,
        "proposed_action": {"to": "a@example.com", "subject": "hi"},
        "reasoning": {"confidence": confidence},
    }
    body.update(extra)
    return client.post("/api/v1/proposals", body, format="json")


def test_proposal_registers_unknown_action_at_level_1_and_is_readable(agent_a):
    r = propose(agent_a, action="crm.contact_update")
    assert r.status_code == 201, r.data
    assert r.data["status"] == "pending" and r.data["confidence"] == 0.8 and r.data["action"] == "crm.contact_update"
    action = Action.objects.get(name="crm.contact_update")
    assert action.autonomy_level == AutonomyLevel.PROPOSE and action.auto_registered
    got = agent_a.get(f"/api/v1/proposals/{r.data['id']}")
    assert got.status_code == 200 and got.data["proposed_action"] == {"to": "a@example.com", "subject": "hi"}
    listing = agent_a.get("/api/v1/proposals?status=pending")
    assert listing.data["count"] == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"action": "Email Send", "proposed_action": {}, "reasoning": {"confidence": 0.5}}, "action"),
        ({"action": "email", "proposed_action": {}, "reasoning": {"confidence": 0.5}}, "action"),
        ({"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": 1.5}}, "reasoning.confidence"),
        ({"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": -0.1}}, "reasoning.confidence"),
        ({"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": "high"}}, "reasoning.confidence"),
        ({"action": "email.send", "proposed_action": {}, "reasoning": {}}, "reasoning.confidence"),
        ({"action": "email.send", "proposed_action": [1, 2], "reasoning": {"confidence": 0.5}}, "proposed_action"),
        ({"proposed_action": {}, "reasoning": {"confidence": 0.5}}, "action"),
    ],
)
def test_bad_proposals_are_400_and_write_nothing(agent_a, body, field):
    r = agent_a.post("/api/v1/proposals", body, format="json")
    assert r.status_code == 400, r.data
    assert field in r.data["fields"], r.data
    assert Proposal.objects.count() == 0 and Action.objects.count() == 0


def test_malformed_json_is_400(agent_a):
    r = agent_a.post("/api/v1/proposals", "{not json", content_type="application/json")
    assert r.status_code == 400 and r.data["code"] == "parse_error"
    assert Proposal.objects.count() == 0


def test_agent_a_cannot_read_or_change_agent_b_objects(agent_a, agent_b, reviewer):
    pid = propose(agent_b).data["id"]
    assert agent_a.get(f"/api/v1/proposals/{pid}").status_code == 404
    assert agent_a.get("/api/v1/proposals").data["count"] == 0
    # a plain agent key cannot review at all
    assert agent_a.post(f"/api/v1/proposals/{pid}/reject", {}, format="json").status_code == 403
    reviewer.post(f"/api/v1/proposals/{pid}/approve", {}, format="json")
    r = agent_a.post("/api/v1/outcomes", {"proposal": pid, "success": True}, format="json")
    assert r.status_code == 404
    assert (
        agent_a.post(
            "/api/v1/overrides",
            {"action": "email.send", "original_action": {"a": 1}, "corrected_action": {"a": 2}, "proposal": pid},
            format="json",
        ).status_code
        == 404
    )
    assert Proposal.objects.get(pk=pid).status == "approved"
    assert FeedbackRecord.objects.count() == 0


def test_agent_cannot_review_its_own_proposal(reviewer):
    pid = propose(reviewer).data["id"]
    r = reviewer.post(f"/api/v1/proposals/{pid}/approve", {}, format="json")
    assert r.status_code == 403
    assert Proposal.objects.get(pk=pid).status == "pending"


def test_reject_writes_one_record_and_completing_it_is_409(agent_a, reviewer):
    pid = propose(agent_a, confidence=0.9).data["id"]
    r = reviewer.post(
        f"/api/v1/proposals/{pid}/reject", {"review_notes": "wrong recipient", "mistake_category": "recipient"}, format="json"
    )
    assert r.status_code == 200 and r.data["status"] == "rejected"
    rec = FeedbackRecord.objects.get()
    assert (rec.feedback_type, rec.human_explanation, rec.agent_confidence, rec.mistake_category) == (
        "rejection",
        "wrong recipient",
        0.9,
        "recipient",
    )
    assert rec.original_action == {"to": "a@example.com", "subject": "hi"} and rec.created_by_key == reviewer.key
    r = agent_a.post("/api/v1/outcomes", {"proposal": pid, "success": True}, format="json")
    assert r.status_code == 409
    assert r.data["current_status"] == "rejected" and "rejected" in r.data["detail"]
    r = reviewer.post(f"/api/v1/proposals/{pid}/approve", {}, format="json")
    assert r.status_code == 409 and r.data["current_status"] == "rejected"
    assert FeedbackRecord.objects.count() == 1


def test_modify_writes_correction_with_computed_delta(agent_a, reviewer):
    pid = propose(agent_a).data["id"]
    new = {"to": "b@example.com", "subject": "hi", "cc": ["boss@example.com"]}
    r = reviewer.post(f"/api/v1/proposals/{pid}/modify", {"modified_action": new, "review_notes": "send to b"}, format="json")
    assert r.status_code == 200 and r.data["status"] == "modified" and r.data["modified_action"] == new
    rec = FeedbackRecord.objects.get()
    assert rec.feedback_type == FeedbackType.CORRECTION
    assert rec.correction_delta == {
        "added": {"cc": ["boss@example.com"]},
        "removed": {},
        "changed": {"to": {"from": "a@example.com", "to": "b@example.com"}},
    }
    # same action as proposed is not a modification
    pid2 = propose(agent_a).data["id"]
    r = reviewer.post(
        f"/api/v1/proposals/{pid2}/modify", {"modified_action": {"to": "a@example.com", "subject": "hi"}}, format="json"
    )
    assert r.status_code == 400 and "modified_action" in r.data["fields"]
    r = reviewer.post(f"/api/v1/proposals/{pid2}/modify", {"modified_action": "nope"}, format="json")
    assert r.status_code == 400
    assert Proposal.objects.get(pk=pid2).status == "pending" and FeedbackRecord.objects.count() == 1


def test_outcomes_complete_or_fail_approved_proposals(agent_a, reviewer):
    ok = propose(agent_a).data["id"]
    bad = propose(agent_a).data["id"]
    for pid in (ok, bad):
        assert reviewer.post(f"/api/v1/proposals/{pid}/approve", {}, format="json").status_code == 200
    r = agent_a.post("/api/v1/outcomes", {"proposal": ok, "success": True, "result": {"id": 7}}, format="json")
    assert r.status_code == 200 and r.data["status"] == "completed"
    assert FeedbackRecord.objects.count() == 0
    r = agent_a.post("/api/v1/outcomes", {"proposal": bad, "success": False, "error": "SMTP 550"}, format="json")
    assert r.status_code == 200 and r.data["status"] == "failed"
    rec = FeedbackRecord.objects.get()
    assert rec.feedback_type == "outcome_failure" and rec.human_explanation == "SMTP 550"
    r = agent_a.post("/api/v1/outcomes", {"proposal": ok, "success": False}, format="json")
    assert r.status_code == 409 and r.data["current_status"] == "completed"


def test_executions_need_level_2_and_are_reviewed_once(agent_a, reviewer):
    body = {
        "action": "email.send",
        "params": {"to": "x@example.com"},
        "reasoning": {"why": "asked"},
        "confidence": 0.7,
        "success": True,
    }
    r = agent_a.post("/api/v1/executions", body, format="json")
    assert r.status_code == 409 and r.data["fields"] == {"action": [r.data["detail"]]}
    assert Action.objects.count() == 0 and Execution.objects.count() == 0
    Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.ACT_REVIEWED)
    r = agent_a.post("/api/v1/executions", {**body, "confidence": 2}, format="json")
    assert r.status_code == 400 and "confidence" in r.data["fields"]
    eid = agent_a.post("/api/v1/executions", body, format="json").data["id"]
    eid2 = agent_a.post("/api/v1/executions", {**body, "duration_ms": 12}, format="json").data["id"]
    r = reviewer.post(
        f"/api/v1/executions/{eid}/review",
        {"outcome": "incorrect", "review_notes": "wrong person", "corrected_action": {"to": "y@example.com"}},
        format="json",
    )
    assert r.status_code == 200 and r.data["review_outcome"] == "incorrect"
    r = reviewer.post(f"/api/v1/executions/{eid}/review", {"outcome": "correct"}, format="json")
    assert r.status_code == 409
    assert reviewer.post(f"/api/v1/executions/{eid2}/review", {"outcome": "correct"}, format="json").status_code == 200
    types = sorted(FeedbackRecord.objects.values_list("feedback_type", flat=True))
    assert types == ["execution_correct", "execution_incorrect"]
    wrong = FeedbackRecord.objects.get(feedback_type="execution_incorrect")
    assert wrong.correction_delta["changed"] == {"to": {"from": "x@example.com", "to": "y@example.com"}}
    assert agent_a.get(f"/api/v1/executions/{eid}").data["review_outcome"] == "incorrect"
    assert reviewer.post(f"/api/v1/executions/{eid2}/review", {"outcome": "maybe"}, format="json").status_code == 400


def test_a_key_holding_a_dot_keeps_its_own_path_in_the_delta(agent_a):
    """{"a.b": ...} and {"a": {"b": ...}} are two keys: each change is in the delta, neither overwrites the other."""
    Action.objects.create(name="email.send")
    body = {
        "action": "email.send",
        "original_action": {"a": {"b": 1}, "a.b": 1, "$": 1, "": 1},
        "corrected_action": {"a": {"b": 2}, "a.b": 3, "$": 4, "": 5},
    }
    r = agent_a.post("/api/v1/overrides", body, format="json")
    assert r.status_code == 201, r.content
    assert r.data["correction_delta"]["changed"] == {
        "a.b": {"from": 1, "to": 2},
        '["a.b"]': {"from": 1, "to": 3},
        '["$"]': {"from": 1, "to": 4},
        '[""]': {"from": 1, "to": 5},
    }


def test_manual_override_and_listing_filters(agent_a, agent_b, reviewer):
    Action.objects.create(name="email.send")
    r = agent_a.post(
        "/api/v1/overrides",
        {
            "action": "email.send",
            "original_action": {"to": "a"},
            "corrected_action": {"to": "b"},
            "explanation": "user changed it",
            "confidence": 0.6,
        },
        format="json",
    )
    assert r.status_code == 201 and r.data["feedback_type"] == "manual_override"
    assert r.data["correction_delta"]["changed"] == {"to": {"from": "a", "to": "b"}}
    assert (
        agent_a.post(
            "/api/v1/overrides", {"action": "nope.missing", "original_action": {}, "corrected_action": {"a": 1}}, format="json"
        ).status_code
        == 404
    )
    pid = propose(agent_a).data["id"]
    reviewer.post(f"/api/v1/proposals/{pid}/reject", {"review_notes": "no"}, format="json")
    assert agent_a.get("/api/v1/feedback-records").data["count"] == 2
    assert agent_a.get("/api/v1/feedback-records?feedback_type=rejection").data["count"] == 1
    assert agent_a.get("/api/v1/feedback-records?action=email.send&feedback_type=manual_override").data["count"] == 1
    assert agent_b.get("/api/v1/feedback-records").data["count"] == 0
    assert agent_a.get("/api/v1/feedback-records?limit=0").status_code == 400


def test_consult_reflects_patterns_rules_calibration_and_level(agent_a, agent_b, reviewer):
    from feedback.services.mistakes import mistake_patterns_detect
    from feedback.services.rules import correction_rules_create

    r = agent_a.get("/api/v1/actions/email.send/consult?confidence=0.8")
    assert r.status_code == 404 and "action" in r.data["fields"]
    Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.AUTONOMOUS)
    r = agent_a.get("/api/v1/actions/email.send/consult?confidence=0.8")
    assert r.status_code == 200
    assert r.data["adjusted_confidence"] == 0.8 and r.data["require_approval"] is False and r.data["warnings"] == []
    assert agent_a.get("/api/v1/actions/email.send/consult?confidence=1.5").status_code == 400
    assert agent_a.get("/api/v1/actions/email.send/consult").status_code == 400
    assert agent_a.get("/api/v1/actions/Bad%20Name/consult?confidence=0.5").status_code == 400
    for _ in range(3):
        pid = propose(agent_a).data["id"]
        reviewer.post(f"/api/v1/proposals/{pid}/reject", {"review_notes": "never email the CEO"}, format="json")
    mistake_patterns_detect()
    r = agent_a.get("/api/v1/actions/email.send/consult?confidence=0.8")
    assert r.data["adjusted_confidence"] == pytest.approx(0.65) and r.data["pattern_penalty"] == pytest.approx(-0.15)
    assert r.data["require_approval"] is True and len(r.data["patterns"]) == 1
    assert "never email the CEO" in r.data["warnings"][0]
    # the floor: 0.4 - 0.15 stops at 0.3; a confidence already below the floor is not raised
    assert agent_a.get("/api/v1/actions/email.send/consult?confidence=0.4").data["adjusted_confidence"] == pytest.approx(0.3)
    assert agent_a.get("/api/v1/actions/email.send/consult?confidence=0.2").data["adjusted_confidence"] == pytest.approx(0.2)
    # agent B is unaffected by A's pattern
    assert agent_b.get("/api/v1/actions/email.send/consult?confidence=0.8").data["adjusted_confidence"] == 0.8
    rules = correction_rules_create()
    assert len(rules) == 1 and MistakePattern.objects.get().status == "mitigated"
    r = agent_a.get("/api/v1/actions/email.send/consult?confidence=0.8")
    assert r.data["adjusted_confidence"] == 0.8  # the pattern is mitigated now; the rule speaks instead
    assert [x["id"] for x in r.data["rules"]] == [rules[0].pk] and r.data["rules"][0]["require_review"] is True
    assert r.data["require_approval"] is True and "a correction rule requires review" in r.data["approval_reasons"]
    CalibrationRecord.objects.create(
        agent=agent_b.agent, window_days=30, sample_count=50, buckets=[], ece=0.3, recommended_adjustment=-0.12
    )
    r = agent_b.get("/api/v1/actions/email.send/consult?confidence=0.75")
    assert r.data["calibration_adjustment"] == -0.12 and r.data["adjusted_confidence"] == pytest.approx(0.63)
    assert r.data["require_approval"] is True  # below CONSULT_APPROVAL_BELOW (0.7)
    CalibrationRecord.objects.create(
        agent=agent_b.agent, window_days=30, sample_count=50, buckets=[], ece=0.3, recommended_adjustment=0.15
    )
    assert agent_b.get("/api/v1/actions/email.send/consult?confidence=0.95").data["adjusted_confidence"] == 1.0


def test_action_catalogue_lists_levels(agent_a):
    Action.objects.create(name="email.send", autonomy_level=2)
    r = agent_a.get("/api/v1/actions")
    assert r.status_code == 200 and r.data[0]["name"] == "email.send" and r.data[0]["autonomy_level"] == 2


def test_a_failure_after_a_modification_to_nothing_records_what_ran(db):
    """A reviewer may modify a proposal to an empty action; the failure record names {} (what ran), not the proposal."""
    from feedback.models import FeedbackRecord
    from tests.conftest import make_client

    agent = make_client(["resolve", "feedback"], name="agent-a")
    reviewer = make_client(["governance"], name="rev")
    body = {"action": "email.send", "proposed_action": {"to": "ceo"}, "reasoning": {"confidence": 0.5}}
    pid = agent.post("/api/v1/proposals", body, format="json").json()["id"]
    assert reviewer.post(f"/api/v1/proposals/{pid}/modify", {"modified_action": {}}, format="json").status_code == 200
    assert (
        agent.post("/api/v1/outcomes", {"proposal": pid, "success": False, "error": "bounced"}, format="json").status_code == 200
    )
    assert FeedbackRecord.objects.get(proposal_id=pid, feedback_type="outcome_failure").original_action == {}


@pytest.mark.parametrize(
    "path,good",
    [
        ("/api/v1/proposals", "pending"),
        ("/api/v1/executions", "incorrect"),
        ("/api/v1/feedback-records", "active"),
        ("/api/v1/mistake-patterns", "active"),
    ],
)
def test_a_misspelt_status_filter_is_400_naming_the_choices(db, path, good):
    from tests.conftest import make_client

    agent = make_client(["resolve", "feedback"], name="agent-a")
    refused = agent.get(path, {"status": "pendng"})
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["status"]
    assert "Unknown status 'pendng'" in refused.json()["detail"] and good in refused.json()["detail"]
    assert agent.get(path, {"status": good}).status_code == 200
    assert agent.get(path, {"status": ""}).status_code == 200


def test_fields_a_decision_would_drop_are_refused_by_name(db):
    """Nothing records a corrected action or a category on a correct review, a category on an approval, or an
    explanation on a success: each is a 400 naming the field, and nothing changes."""
    from actions.models import Action
    from feedback.models import Execution, FeedbackRecord, Proposal
    from tests.conftest import make_client

    Action.objects.create(name="deploy.run", autonomy_level=2)  # executions need level 2
    agent = make_client(["resolve", "feedback"], name="agent-a")
    reviewer = make_client(["governance"], name="rev")
    run = {"action": "deploy.run", "params": {"env": "staging"}, "confidence": 0.9, "success": True}
    eid = agent.post("/api/v1/executions", run, format="json").json()["id"]
    for extra, field in (
        ({"corrected_action": {"env": "prod"}}, "corrected_action"),
        ({"mistake_category": "wrong_target"}, "mistake_category"),
    ):
        refused = reviewer.post(f"/api/v1/executions/{eid}/review", {"outcome": "correct", **extra}, format="json")
        assert refused.status_code == 400 and list(refused.json()["fields"]) == [field], refused.json()
    same = reviewer.post(
        f"/api/v1/executions/{eid}/review", {"outcome": "incorrect", "corrected_action": {"env": "staging"}}, format="json"
    )
    assert same.status_code == 400 and "is what ran" in same.json()["detail"]
    assert not Execution.objects.get(pk=eid).review_outcome and not FeedbackRecord.objects.exists()
    assert reviewer.post(f"/api/v1/executions/{eid}/review", {"outcome": "correct"}, format="json").status_code == 200

    body = {"action": "email.send", "proposed_action": {"to": "ceo"}, "reasoning": {"confidence": 0.5}}
    pid = agent.post("/api/v1/proposals", body, format="json").json()["id"]
    approve = reviewer.post(f"/api/v1/proposals/{pid}/approve", {"mistake_category": "tone"}, format="json")
    assert approve.status_code == 400 and "mistake_category" in approve.json()["fields"]
    assert Proposal.objects.get(pk=pid).status == "pending"
    assert reviewer.post(f"/api/v1/proposals/{pid}/approve", {"review_notes": "fine"}, format="json").status_code == 200
    success = agent.post("/api/v1/outcomes", {"proposal": pid, "success": True, "explanation": "went well"}, format="json")
    assert success.status_code == 400 and list(success.json()["fields"]) == ["explanation"]
    assert Proposal.objects.get(pk=pid).status == "approved"
    assert agent.post("/api/v1/outcomes", {"proposal": pid, "success": True}, format="json").status_code == 200


def test_mistake_patterns_filter_by_the_feedback_type_of_their_records():
    """A pattern of rejections named by their mistake category is found by feedback_type=rejection."""
    from feedback.services.mistakes import mistake_patterns_detect

    agent, reviewer = make_client(["resolve", "feedback"], name="agent-a"), make_client(["governance"], name="rev")
    for _ in range(3):
        body = {"action": "email.send", "proposed_action": {"to": "a@x.com"}, "reasoning": {"confidence": 0.8}}
        pid = agent.post("/api/v1/proposals", body, format="json").json()["id"]
        assert (
            reviewer.post(f"/api/v1/proposals/{pid}/reject", {"mistake_category": "wrong_target"}, format="json").status_code
            == 200
        )
    mistake_patterns_detect()
    assert agent.get("/api/v1/mistake-patterns", {"feedback_type": "rejection"}).json()["count"] == 1
    assert agent.get("/api/v1/mistake-patterns", {"feedback_type": "execution_incorrect"}).json()["count"] == 0
    refused = agent.get("/api/v1/mistake-patterns", {"feedback_type": "wrong_target"})  # a category, not a type
    assert refused.status_code == 400 and "feedback_type" in refused.json()["fields"], refused.content
    assert agent.get("/api/v1/mistake-patterns").json()["results"][0]["feedback_types"] == ["rejection"]

    # its records archived, the pattern keeps its types: the filter still finds it, and detection keeps them
    from feedback.models import FeedbackRecordArchive
    from feedback.services.retention import feedback_records_archive

    FeedbackRecord.objects.update(created_at=timezone.now() - timedelta(days=settings.FEEDBACK_RECORD_RETENTION_DAYS + 1))
    feedback_records_archive()
    assert not FeedbackRecord.objects.exists() and FeedbackRecordArchive.objects.count() == 3
    mistake_patterns_detect()
    assert agent.get("/api/v1/mistake-patterns", {"feedback_type": "rejection"}).json()["count"] == 1


def test_a_misspelt_feedback_type_filter_on_feedback_records_is_a_400():
    agent = make_client(["resolve", "feedback"], name="agent-a")
    refused = agent.get("/api/v1/feedback-records", {"feedback_type": "rejectoin"})
    assert refused.status_code == 400 and "feedback_type" in refused.json()["fields"], refused.content
    assert agent.get("/api/v1/feedback-records", {"feedback_type": "rejection"}).status_code == 200


@pytest.mark.parametrize(
    "proposed, modified, same",
    [
        ({"count": 1}, {"count": 1.0}, True),  # one JSON number, as jsonb stores it
        ({"to": [1, 2]}, {"to": [1.0, 2]}, True),
        ({"flag": True}, {"flag": 1}, False),  # true is no number in JSON
        ({"to": [True]}, {"to": [1]}, False),
    ],
)
def test_a_modification_is_a_correction_only_when_it_changes_the_json(proposed, modified, same):
    agent, gov = make_client(["resolve", "feedback"], name="agent-a"), make_client(["governance"], name="rev")
    body = {"action": "email.send", "proposed_action": proposed, "reasoning": {"confidence": 0.9}}
    pid = agent.post("/api/v1/proposals", body, format="json").json()["id"]
    answer = gov.post(f"/api/v1/proposals/{pid}/modify", {"modified_action": modified}, format="json")
    if same:
        assert answer.status_code == 400 and "modified_action" in answer.json()["fields"], answer.content
        assert Proposal.objects.get(pk=pid).status == "pending" and not FeedbackRecord.objects.exists()
    else:
        assert answer.status_code == 200, answer.content
        assert FeedbackRecord.objects.get().feedback_type == "correction"
