"""A candidate only agents with private user data proposed is their users' text: another agent's governance key
neither lists, reads nor decides it (REST and MCP); the reviewers do, and so does a shared agent's key once shared
traffic repeated it."""

import pytest

from agents.authentication import verified_keys_forget
from learning.models import LearnedPhrase, LearningCandidate
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


def test_a_reviewers_claim_on_a_private_candidate_answers_another_agent_404_not_who_holds_it(cbus, run_tasks):
    """The inbox's claim is checked before the decision's own lookup: for an item the agent may not read it must
    answer as for an unknown id (REST and MCP), never with the claim's reviewer and time."""
    from review.models import Kind
    from review.services import claim_take

    private, shared = _agent("private", True), _agent("shared", False)
    _click(private, run_tasks)
    row = LearningCandidate.objects.get(normalized="list all cbus", user_id="alice")
    rita = reviewer_user("rita", "review_learningcandidate", "view_learningcandidate")
    claim_take(kind=Kind.CANDIDATE, object_id=row.pk, tenant_id=row.tenant_id, user=rita)
    for path, body in ((f"{CANDIDATES}/{row.pk}/approve", {}), (f"{CANDIDATES}/{row.pk}/reject", {"reason": "x"})):
        answer = shared.post(path, body, format="json")
        assert answer.status_code == 404 and "rita" not in answer.content.decode(), answer.content
    for tool, args in (("approve_learning_candidate", {}), ("reject_learning_candidate", {"reason": "x"})):
        refused = mcp_call(tool, shared.raw, {"candidate_id": row.pk, **args})
        assert refused.error["http_status"] == 404 and "rita" not in str(refused.error)
    # A key that may read it still learns why it cannot decide it now.
    glob = LearningCandidate.objects.get(normalized="list all cbus", user_id__isnull=True)
    claim_take(kind=Kind.CANDIDATE, object_id=glob.pk, tenant_id=glob.tenant_id, user=rita)
    other = _agent("other-shared", False)
    _click(shared, run_tasks)  # shared traffic repeats it: shared keys read it now
    held = other.post(f"{CANDIDATES}/{glob.pk}/approve", {}, format="json")
    assert held.status_code == 409 and held.json()["code"] == "claimed", held.content
    assert LearningCandidate.objects.get(pk=row.pk).status == row.status


def test_learning_stats_count_only_what_the_key_may_read(cbus, run_tasks):
    """Counts are an inference channel too: another agent's key does not see a private agent's users' candidates
    and phrases in them; the private agent's own key and a reviewer do."""
    private, shared = _agent("private", True), _agent("shared", False)
    before = {c: c.get("/api/v1/learning/stats", {"time_range": "all"}).json() for c in (private, shared)}
    _click(private, run_tasks)
    after_shared = shared.get("/api/v1/learning/stats", {"time_range": "all"}).json()
    for field in ("candidates_total", "candidates_by_status", "active_learned_phrases"):
        assert after_shared[field] == before[shared][field], field
    assert (
        mcp_call("learning_stats", shared.raw, {"time_range": "all"}).data["candidates_total"]
        == before[shared]["candidates_total"]
    )
    after_private = private.get("/api/v1/learning/stats", {"time_range": "all"}).json()
    assert after_private["candidates_total"] > before[private]["candidates_total"]
    assert after_private["active_learned_phrases"] == before[private]["active_learned_phrases"] + 1
    from learning.selectors import learning_stats  # no agent acting (a reviewer's page, a command): every row

    assert learning_stats(time_range="all")["candidates_total"] == after_private["candidates_total"]


def _owners(normalized="show cbus", user="alice") -> list:
    return sorted(
        LearnedPhrase.objects.filter(normalized=normalized, user_id=user).values_list("private_agent_id", flat=True),
        key=str,
    )


def test_a_users_candidate_is_kept_apart_per_private_agent(cbus, run_tasks):
    """A click through a private agent leaves the variant "show cbus" pending for alice (0.85, under the 0.90 that
    promotes); the same click through a shared agent adds to a candidate of its own, not to the private one, so
    neither promotes on the other's evidence (a shared click once wrote the private agent's phrase so)."""
    private, shared = _agent("private", True), _agent("shared", False)
    _click(private, run_tasks)
    mine = LearningCandidate.objects.get(normalized="show cbus", user_id="alice", status="pending")
    assert (mine.private_agent_id, mine.seen_by_agents) == (private.agent.pk, [private.agent.pk])
    _click(shared, run_tasks)
    pending = LearningCandidate.objects.filter(normalized="show cbus", user_id="alice", status="pending")
    assert sorted((c.private_agent_id or 0, c.occurrence_count) for c in pending) == [(0, 1), (private.agent.pk, 1)]
    assert _owners() == []  # 0.85 each: nothing promoted on the other's evidence (together they were 0.98)


def test_candidates_stored_before_owners_existed_become_their_private_agents(cbus, run_tasks):
    import importlib
    from types import SimpleNamespace

    from django.apps import apps as django_apps
    from django.db import connection

    private, shared, later = _agent("private", True), _agent("shared", False), _agent("later", False)
    _click(private, run_tasks)
    _click(shared, run_tasks, user="bob")
    _click(later, run_tasks, user="carol")
    later.agent.private_user_data = True  # switched after it proposed: what it wrote while shared stays shared
    later.agent.save()
    LearningCandidate.objects.update(private_agent=None)  # as stored before the column existed
    migration = importlib.import_module("learning.migrations.0016_candidate_private_agent")
    migration.owners_filled(django_apps, SimpleNamespace(connection=connection))
    owned = dict(LearningCandidate.objects.filter(normalized="show cbus").values_list("user_id", "private_agent_id"))
    assert owned == {"alice": private.agent.pk, "bob": None, "carol": None}
    assert set(LearningCandidate.objects.filter(user_id=None).values_list("private_agent_id", flat=True)) == {None}
