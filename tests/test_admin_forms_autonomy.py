"""The autonomy transition page cannot decide: decisions go through the inbox or the bulk actions' confirmation."""

import pytest

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition
from autonomy.services import autonomy_evaluate
from tests.conftest import fill_history, reviewer_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def transition(db):
    agent = Agent.objects.create(name="ops")
    send = Action.objects.create(name="email.send", autonomy_level=1)
    fill_history(send, agent, completed=25)
    (proposed,) = autonomy_evaluate()["proposed"]
    return proposed


@pytest.fixture
def approver(client):
    client.force_login(
        reviewer_user("rita", "view_autonomytransition", "change_autonomytransition", "approve_autonomytransition")
    )
    return client


def test_change_form_cannot_approve(approver, transition):
    url = f"/admin/autonomy/autonomytransition/{transition.pk}/change/"
    page = approver.get(url).content.decode()
    assert 'name="decision"' not in page
    assert f"/admin/inbox/transition/{transition.pk}/" in page  # the way to decide, with its confirmation
    response = approver.post(url, {"decision": "approve", "notes": "via change form"})
    assert response.status_code == 403
    transition.refresh_from_db()
    assert transition.status == "proposed" and transition.decided_by is None
    assert Action.objects.get(name="email.send").autonomy_level == 1


def test_bulk_actions_still_behind_confirmation(approver, transition):
    listing = "/admin/autonomy/autonomytransition/"
    page = approver.post(listing, {"action": "approve_selected", "_selected_action": [transition.pk]})
    assert page.status_code == 200 and "email.send: level 1 → 2" in page.content.decode()
    assert AutonomyTransition.objects.get(pk=transition.pk).status == "proposed"
    done = approver.post(listing, {"action": "approve_selected", "_selected_action": [transition.pk], "post": "yes"})
    assert done.status_code == 302
    assert AutonomyTransition.objects.get(pk=transition.pk).status == "applied"
