"""Pages and lists whose query count stays the same however many rows they show."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from actions.models import Action
from autonomy.models import AutonomyTransition
from feedback.models import MistakePattern
from feedback.services.mistakes import mistake_patterns_detect
from learning.models import DecisionFit, DecisionFitEvent
from tests.conftest import make_client, reject_n, reviewer_user
from tests.test_review_inbox import signed_in

pytestmark = pytest.mark.django_db


def _queries(client, url) -> int:
    client.get(url)  # warm: the session, the key and the permissions are read once per process or request
    with CaptureQueriesContext(connection) as seen:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(seen.captured_queries)


def _mistakes(first: int, last: int):
    from agents.models import Agent

    for i in range(first, last):
        reject_n(Agent.objects.create(name=f"agent-{i}"), 3, category=f"kind-{i}")
    mistake_patterns_detect()


def test_feedback_records_and_patterns_lists_read_the_same_queries_for_3_or_12_rows():
    root = signed_in(reviewer_user("root", superuser=True))
    pages = ["/admin/feedback/feedbackrecord/", "/admin/feedback/mistakepattern/"]
    _mistakes(0, 1)
    few = [_queries(root, page) for page in pages]
    _mistakes(1, 4)
    assert MistakePattern.objects.count() == 4
    assert [_queries(root, page) for page in pages] == few


def test_a_fits_events_are_read_with_their_fit_and_reviewer():
    root = signed_in(reviewer_user("root", superuser=True))
    fit = DecisionFit.objects.create(version=1, source="prior", status="live", embedding_model="m", params={})
    page = f"/admin/learning/decisionfit/{fit.pk}/change/"

    def more(n):
        for i in range(n):
            by = reviewer_user(f"r{DecisionFitEvent.objects.count()}-{i}")
            DecisionFitEvent.objects.create(fit=fit, action="pinned", by=by)

    more(2)
    few = _queries(root, page)
    more(8)
    assert _queries(root, page) == few


def test_transitions_and_actions_come_in_pages_with_the_deciding_keys_agent_read_once():
    governance = make_client(["governance", "resolve"], name="tool")
    for i in range(12):
        action = Action.objects.create(name=f"task.step_{i:02d}")
        AutonomyTransition.objects.create(
            action=action, from_level=1, to_level=2, evidence={}, reason="r", status="rejected", decided_by_key=governance.key
        )
    url = "/api/v1/autonomy/transitions"
    assert _queries(governance, url + "?limit=2") == _queries(governance, url)
    page = governance.get(url, {"limit": 5, "offset": 10}).json()
    assert len(page) == 2 and page[-1]["action"] == "task.step_00"
    assert governance.get(url, {"limit": 0}).status_code == 400
    assert governance.get(url, {"limit": 5}).headers["X-Total-Count"] == "12"
    actions = governance.get("/api/v1/actions", {"limit": 3, "offset": 3})
    assert [a["name"] for a in actions.json()] == ["task.step_03", "task.step_04", "task.step_05"]
    assert actions.headers["X-Total-Count"] == str(Action.objects.count())
    assert governance.get("/api/v1/actions", {"limit": 5000}).status_code == 400


def _chain(n):
    from tests.conftest import make_memory

    versions = []
    for i in range(n):
        versions.append(
            make_memory(
                content=f"Deploy the app with release {i} of the runbook.",
                version=i + 1,
                supersedes=versions[-1] if versions else None,
            )
        )
    return versions


def test_a_memorys_version_chain_is_read_in_two_queries_whatever_its_length():
    from memories.models import Memory
    from memories.selectors import memory_version_chain
    from tests.conftest import make_memory

    versions = _chain(8)
    for middle in (versions[0], versions[3], versions[7]):
        with CaptureQueriesContext(connection) as seen:
            chain = memory_version_chain(memory=middle)
        assert [m.pk for m in chain] == [v.pk for v in versions] and len(seen.captured_queries) == 2
    other = make_memory(content="Rotate the logs weekly.")
    assert memory_version_chain(memory=other) == [other]
    Memory.objects.filter(pk=versions[0].pk).update(supersedes=versions[7])  # a loop (a damaged row): it stops
    looped = [m.pk for m in memory_version_chain(memory=versions[3])]
    assert sorted(looped) == sorted(v.pk for v in versions)  # each version once, and the walk ends
    root = signed_in(reviewer_user("root", superuser=True))
    page = root.get(f"/admin/memories/memory/{versions[3].pk}/change/")
    assert page.status_code == 200 and f"#{versions[7].pk} v8" in page.content.decode()
