"""A candidate only agents with private user data proposed is their users' text: another agent's governance key
neither lists, reads nor decides it (REST and MCP); the reviewers do, and so does a shared agent's key once shared
traffic repeated it."""

import pytest

from agents.authentication import verified_keys_forget
from learning.models import LearningCandidate
from tests.conftest import make_client, reviewer_client, reviewer_user
from tests.test_learning_disambiguation import resolve, select
from tests.test_mcp_policies import mcp_call

pytestmark = pytest.mark.django_db

CANDIDATES = "/api/v1/learning/candidates"


@pytest.fixture(autouse=True)
def switches_reach_every_process_at_once(settings):
    settings.API_KEY_CACHE_S = 0


def _agent(name, private):
    client = make_client(["resolve", "feedback", "governance"], name=name)
    client.agent.private_user_data = private
    client.agent.save()
    verified_keys_forget()
    return client


def _click(client, run_tasks, user="alice"):
    body = resolve(client, "list all cbus", user_id=user)
    assert body["outcome"] == "ambiguous", body
    assert run_tasks(select, client, body["request_id"], "cbu.list").status_code == 200


def _listed(client) -> set[tuple[str | None, str]]:
    answer = client.get(CANDIDATES, {"limit": 200})
    assert answer.status_code == 200, answer.content
    return {(c["user_id"], c["normalized"]) for c in answer.json()["results"]}


def test_another_agents_key_never_sees_a_private_agents_users_candidates(cbus, run_tasks):
    private, shared, other_private = _agent("private", True), _agent("shared", False), _agent("other-private", True)
    _click(private, run_tasks)
    rows = list(LearningCandidate.objects.filter(normalized="list all cbus"))
    assert {r.user_id for r in rows} == {"alice", None} and all(r.seen_by_agents == [private.agent.pk] for r in rows)

    for outsider in (shared, other_private):
        assert ("alice", "list all cbus") not in _listed(outsider) and (None, "list all cbus") not in _listed(outsider)
        for row in rows:
            assert outsider.post(f"{CANDIDATES}/{row.pk}/approve", {}, format="json").status_code == 404
            assert outsider.post(f"{CANDIDATES}/{row.pk}/reject", {"reason": "x"}, format="json").status_code == 404
        stats = outsider.get("/api/v1/learning/stats", {"time_range": "all"}).json()
        assert "list all cbus" not in str(stats["top_pending"])
        assert [LearningCandidate.objects.get(pk=r.pk).status for r in rows] == [r.status for r in rows]  # none decided

    # Its own key lists them (and may not decide them: four eyes); a reviewer lists and decides them.
    assert ("alice", "list all cbus") in _listed(private)
    rita = reviewer_client(reviewer_user("rita", "review_learningcandidate", "view_learningcandidate"))
    assert ("alice", "list all cbus") in _listed(rita) and (None, "list all cbus") in _listed(rita)
    glob = next(r for r in rows if r.user_id is None)
    assert rita.post(f"{CANDIDATES}/{glob.pk}/approve", {}, format="json").status_code == 200


def test_over_mcp_too(cbus, run_tasks):
    private, shared = _agent("private", True), _agent("shared", False)
    _click(private, run_tasks)
    listed = mcp_call("list_learning_candidates", shared.raw, {"limit": 200}).data
    assert "list all cbus" not in {c["normalized"] for c in listed["results"]} and listed["count"] == len(listed["results"])
    row = LearningCandidate.objects.filter(normalized="list all cbus").first()
    refused = mcp_call("approve_learning_candidate", shared.raw, {"candidate_id": row.pk})
    assert refused.error["http_status"] == 404
    assert "list all cbus" in {c["normalized"] for c in mcp_call("list_learning_candidates", private.raw, {}).data["results"]}


def test_once_shared_traffic_repeats_it_a_shared_agents_key_decides_it(cbus, run_tasks):
    private, shared, governor = _agent("private", True), _agent("shared", False), _agent("governor", False)
    _click(private, run_tasks)
    _click(shared, run_tasks)
    glob = LearningCandidate.objects.get(normalized="list all cbus", user_id=None)
    assert set(glob.seen_by_agents) == {private.agent.pk, shared.agent.pk}
    assert (None, "list all cbus") in _listed(governor)
    assert governor.post(f"{CANDIDATES}/{glob.pk}/approve", {}, format="json").status_code == 200


def test_a_candidate_of_a_deleted_private_agent_is_left_to_the_reviewers(cbus, run_tasks):
    private, shared = _agent("private", True), _agent("shared", False)
    _click(private, run_tasks)
    private.agent.delete()
    assert ("alice", "list all cbus") not in _listed(shared) and (None, "list all cbus") not in _listed(shared)
