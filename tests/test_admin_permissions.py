"""The admin holds every page to the permission and the tenants it shows: history pages are read-only and show only
what the change page would, bulk actions need the permission of the change they make, and reviewers' tokens are
their own."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from actions.models import Action
from agents.models import Agent, ApiKey
from agents.services import api_key_revoke
from autonomy.models import AutonomyTransition
from autonomy.services.evaluation import autonomy_transition_approve
from memories.models import Memory
from review.models import Decision
from tenants.services import tenant_create
from tests.conftest import make_client, make_memory, reviewer_user
from tests.test_review_inbox import signed_in
from tests.test_tenants import _reviewer

pytestmark = pytest.mark.django_db


def _level_three_reverted():
    email = Action.objects.create(name="email.send", autonomy_level=1)
    boss = reviewer_user("boss", "approve_autonomytransition", "view_action", "change_action")
    transition = AutonomyTransition.objects.create(action=email, from_level=1, to_level=3, evidence={}, reason="good")
    autonomy_transition_approve(transition=transition, user=boss)
    response = signed_in(boss).post(f"/admin/revert/autonomy/{email.pk}/", {"reason": "too risky", "revert_of": transition.pk})
    assert response.status_code == 302 and Action.objects.get(pk=email.pk).autonomy_level == 1
    return email, boss, AutonomyTransition.objects.get(pk=transition.pk)


def test_a_past_version_is_shown_but_never_restored_from_its_history_page():
    email, boss, transition = _level_three_reverted()
    level_three = email.history.get(autonomy_level=3).history_id
    page = f"/admin/actions/action/{email.pk}/history/{level_three}/"
    for user in (reviewer_user("vic", "view_action"), boss, reviewer_user("root", superuser=True)):
        client = signed_in(user)
        shown = client.get(page)
        assert shown.status_code == 200 and 'name="_save"' not in shown.content.decode()
        assert client.post(page, {"autonomy_level": 3}).status_code == 405
        assert Action.objects.get(pk=email.pk).autonomy_level == 1
    proposed = transition.history.filter(status="proposed").first().history_id
    posted = signed_in(boss).post(f"/admin/autonomy/autonomytransition/{transition.pk}/history/{proposed}/", {})
    assert posted.status_code == 405
    assert transition.status != "proposed" and AutonomyTransition.objects.get(pk=transition.pk).status == transition.status


def test_another_tenants_agent_and_key_have_no_history_page_for_a_reviewer():
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    key = make_client(["resolve"], name="globex-agent", tenant=globex).key
    api_key_revoke(key=key)
    staff, _ = _reviewer("acme-staff", acme, "view_apikey", "change_apikey", "view_agent", "change_agent")
    client = signed_in(staff)
    version = ApiKey.history.filter(id=key.pk).first().history_id
    for page in (
        f"/admin/agents/apikey/{key.pk}/history/",
        f"/admin/agents/apikey/{key.pk}/history/{version}/",
        f"/admin/agents/agent/{key.agent_id}/history/",
    ):
        assert client.get(page).status_code == 404, page
    client.post(f"/admin/agents/apikey/{key.pk}/history/{version}/", {"name": "x", "scopes": '["governance"]'})
    key.refresh_from_db()
    assert key.revoked_at is not None and key.scopes == ["resolve"]
    assert Agent.objects.get(pk=key.agent_id).name == "globex-agent"
    # A superuser sees every tenant's history, and a deleted agent's (its history is all that is left).
    root = signed_in(reviewer_user("root", superuser=True))
    assert root.get(f"/admin/agents/apikey/{key.pk}/history/").status_code == 200
    agent_id = key.agent_id
    Agent.objects.filter(pk=agent_id).delete()
    assert root.get(f"/admin/agents/agent/{agent_id}/history/").status_code == 200
    assert client.get(f"/admin/agents/agent/{agent_id}/history/").status_code == 404


def test_memory_bulk_actions_need_the_permission_of_the_change():
    memory = make_memory()
    viewer = signed_in(reviewer_user("viewer", "view_memory"))
    listing = viewer.get("/admin/memories/memory/").content.decode()
    assert 'value="deprecate"' not in listing and 'value="promote"' not in listing and 'value="purge_deprecated"' not in listing
    viewer.post("/admin/memories/memory/", {"action": "deprecate", "_selected_action": [memory.pk], "reason": "viewer"})
    viewer.post("/admin/memories/memory/", {"action": "promote", "_selected_action": [memory.pk], "post": "yes"})
    assert Memory.objects.get(pk=memory.pk).status == memory.status
    editor = signed_in(reviewer_user("editor", "view_memory", "change_memory"))
    editor.post("/admin/memories/memory/", {"action": "deprecate", "_selected_action": [memory.pk], "reason": "stale"})
    assert Memory.objects.get(pk=memory.pk).status == "deprecated"


def test_a_reviewer_sees_and_makes_only_their_own_token_and_never_reads_a_key_from_the_list():
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    boss, _ = _reviewer("globex-boss", globex, "approve_autonomytransition")
    rita, _ = _reviewer("acme-rev", acme, "view_tokenproxy", "add_tokenproxy")
    Token.objects.filter(user=rita).delete()
    client = signed_in(rita)
    listing = client.get("/admin/authtoken/tokenproxy/").content.decode()
    assert Token.objects.get(user=boss).key not in listing and "globex-boss" not in listing
    root = get_user_model().objects.create_superuser("root", password="x-12345678")
    client.post("/admin/authtoken/tokenproxy/add/", {"user": root.pk})
    assert not Token.objects.filter(user=root).exists()
    shown = client.post("/admin/authtoken/tokenproxy/add/", {"user": rita.pk}, follow=True).content.decode()
    mine = Token.objects.get(user=rita)
    assert mine.key in shown and "not shown again" in shown
    assert mine.key not in client.get("/admin/authtoken/tokenproxy/").content.decode()


def test_a_filter_the_archive_export_cannot_apply_goes_back_to_the_list_not_a_500():
    client = signed_in(reviewer_user("root", superuser=True))
    client.raise_request_exception = False
    for query in ("created_at__gte=notadate", "nosuchfield=1", "agent_confidence__gt=x"):
        response = client.get(f"/admin/feedback/feedbackrecordarchive/export-csv/?{query}")
        assert response.status_code == 302 and response["Location"].endswith("?e=1"), query


def test_the_learning_report_pages_need_the_view_permission():
    nobody = signed_in(reviewer_user("nobody"))
    for page in ("/admin/learning/learningsignal/per-phrase/", "/admin/learning/disambiguationrequest/outcomes/"):
        assert nobody.get(page).status_code == 403, page
    viewer = signed_in(reviewer_user("viewer", "view_learningsignal", "view_disambiguationrequest"))
    for page in ("/admin/learning/learningsignal/per-phrase/", "/admin/learning/disambiguationrequest/outcomes/"):
        assert viewer.get(page).status_code == 200, page


def test_the_decision_logs_user_filter_names_only_reviewers_who_decided_in_the_tenants_shown():
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    _reviewer("globex-boss", globex)
    rita, _ = _reviewer("acme-rev", acme, "view_decision")
    Decision.objects.create(tenant=acme, kind="rule", object_id=1, user=rita, verdict="approve")
    page = signed_in(rita).get("/admin/review/decision/").content.decode()
    assert "globex-boss" not in page and "acme-rev" in page


def test_users_and_groups_are_managed_by_superusers_only_whatever_a_staff_user_may():
    from django.contrib.auth.models import Group

    theirs = reviewer_user("gina")
    staff = reviewer_user(
        "stan", "view_user", "change_user", "add_user", "delete_user", "view_group", "change_group", "add_group"
    )
    group = Group.objects.create(name="reviewers")
    client = signed_in(staff)
    pages = [
        "/admin/auth/user/",
        f"/admin/auth/user/{theirs.pk}/change/",
        f"/admin/auth/user/{theirs.pk}/password/",
        "/admin/auth/user/add/",
        "/admin/auth/group/",
        f"/admin/auth/group/{group.pk}/change/",
    ]
    for page in pages:
        assert client.get(page).status_code == 403, page
    refused = client.post(f"/admin/auth/user/{staff.pk}/change/", {"username": "stan", "is_superuser": "on"})
    assert refused.status_code == 403 and not get_user_model().objects.get(pk=staff.pk).is_superuser
    found = client.get("/admin/autocomplete/", {"app_label": "tenants", "model_name": "membership", "field_name": "user"})
    assert found.status_code == 403
    root = signed_in(reviewer_user("root", superuser=True))
    for page in pages:
        assert root.get(page).status_code == 200, page
