"""Admin add forms and filters of tenant-owned rows: a reviewer of several tenants chooses the new row's tenant among
theirs, a reviewer of one is asked nothing, the agent list's tenant filter names only tenants in view, and a new
action starts at level 1 whatever the form posts."""

import pytest
from django.test import Client

from actions.models import Action, AutonomyLevel
from agents.models import Agent
from learning.models import EntityAlias, Verb
from tenants.context import tenant_scope
from tenants.selectors import tenant_default
from tenants.services import membership_add, tenant_create
from tests.conftest import reviewer_user

pytestmark = pytest.mark.django_db

ADDS = {
    "action": ("/admin/actions/action/add/", Action, {"name": "wire.transfer", "description": "x"}),
    "agent": ("/admin/agents/agent/add/", Agent, {"name": "new-agent", "description": "", "is_active": "on"}),
    "verb": (
        "/admin/learning/verb/add/",
        Verb,
        {"name": "wire.send", "domain": "wire", "is_active": "on", "phrases-TOTAL_FORMS": "0", "phrases-INITIAL_FORMS": "0"},
    ),
    "alias": (
        "/admin/learning/entityalias/add/",
        EntityAlias,
        {
            "alias": "big blue",
            "canonical_name": "IBM",
            "entity_type": "entity",
            "confidence": "1",
            "occurrence_count": "1",
            "source": "manual",
        },
    ),
}
PERMISSIONS = [f"{verb}_{model}" for model in ("action", "agent", "verb", "entityalias") for verb in ("add", "view", "change")]


def signed_in(user):
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def made(model, **lookup):
    with tenant_scope("*"):
        return list(model.objects.filter(**lookup).values_list("tenant__slug", flat=True))


@pytest.fixture
def tenants(db):
    """acme and globex, whose reviewer rita belongs to both and the default tenant; initech is not hers."""
    acme, globex, initech = (tenant_create(slug=s) for s in ("acme", "globex", "initech"))
    rita = reviewer_user("rita", *PERMISSIONS)
    membership_add(user=rita, tenant=acme)
    membership_add(user=rita, tenant=globex)
    return {"acme": acme, "globex": globex, "initech": initech, "rita": signed_in(rita)}


@pytest.mark.parametrize("kind", ADDS)
def test_a_reviewer_of_several_tenants_chooses_one_of_theirs(tenants, kind):
    url, model, data = ADDS[kind]
    rita = tenants["rita"]
    form = rita.get(url).content.decode()
    assert 'name="tenant"' in form and "acme" in form and "globex" in form and "initech" not in form

    missing = rita.post(url, data)
    assert missing.status_code == 200 and "This field is required" in missing.content.decode()
    foreign = rita.post(url, {**data, "tenant": tenants["initech"].pk})
    assert foreign.status_code == 200 and "Select a valid choice" in foreign.content.decode()
    assert made(model) == []

    created = rita.post(url, {**data, "tenant": tenants["globex"].pk})
    assert created.status_code == 302
    assert made(model) == ["globex"]


@pytest.mark.parametrize("kind", ["action", "agent", "verb"])
def test_a_name_taken_in_the_chosen_tenant_is_a_form_error(tenants, kind):
    url, model, data = ADDS[kind]
    for slug in ("acme", "globex"):
        assert tenants["rita"].post(url, {**data, "tenant": tenants[slug].pk}).status_code == 302
    again = tenants["rita"].post(url, {**data, "tenant": tenants["acme"].pk})
    assert again.status_code == 200 and "already exists" in again.content.decode()
    assert sorted(made(model, name=data["name"])) == ["acme", "globex"]


@pytest.mark.parametrize("kind", ADDS)
def test_a_reviewer_of_one_tenant_is_asked_nothing(db, kind):
    url, model, data = ADDS[kind]
    tenant_create(slug="acme")
    client = signed_in(reviewer_user("solo", *PERMISSIONS))
    assert 'name="tenant"' not in client.get(url).content.decode()
    assert client.post(url, data).status_code == 302
    assert made(model) == ["default"]
    if kind != "alias":
        again = client.post(url, data)
        assert again.status_code == 200 and "already exists" in again.content.decode()


def test_a_staff_user_without_a_tenant_adds_nothing(db):
    user = reviewer_user("nobody", *PERMISSIONS)
    user.tenant_memberships.all().delete()
    client = signed_in(user)
    for url, _, data in ADDS.values():
        assert client.get(url).status_code == 403
        assert client.post(url, data).status_code == 403


def test_a_superuser_chooses_when_there_are_several_tenants(db):
    root = signed_in(reviewer_user("root", superuser=True))
    url, _, data = ADDS["action"]
    assert 'name="tenant"' not in root.get(url).content.decode()  # the default tenant only
    acme = tenant_create(slug="acme")
    assert 'name="tenant"' in root.get(url).content.decode()
    assert root.post(url, {**data, "tenant": acme.pk}).status_code == 302
    assert made(Action, name="wire.transfer") == ["acme"]


@pytest.mark.parametrize("level", ["2", "3"])
def test_a_new_action_starts_at_level_one_whatever_is_posted(db, level):
    client = signed_in(reviewer_user("rita", "add_action", "view_action"))
    form = client.get("/admin/actions/action/add/").content.decode()
    assert 'name="autonomy_level"' not in form and 'name="auto_registered"' not in form
    posted = client.post("/admin/actions/action/add/", {**ADDS["action"][2], "autonomy_level": level, "auto_registered": "on"})
    assert posted.status_code == 302
    action = Action.objects.get(name="wire.transfer")
    assert action.autonomy_level == AutonomyLevel.PROPOSE and not action.auto_registered


def test_the_agent_lists_tenant_filter_names_only_tenants_in_view(db):
    secret, acme = tenant_create(slug="globex-secret-merger"), tenant_create(slug="acme")
    for tenant in (secret, acme, tenant_default()):
        with tenant_scope([tenant.pk]):
            Agent.objects.create(name=f"agent-of-{tenant.slug}", tenant=tenant)
    solo = signed_in(reviewer_user("solo", "view_agent")).get("/admin/agents/agent/").content.decode()
    assert "agent-of-default" in solo and "agent-of-acme" not in solo and "acme" not in solo
    assert "globex-secret-merger" not in solo

    rita = reviewer_user("rita", "view_agent")
    membership_add(user=rita, tenant=acme)
    both = signed_in(rita).get("/admin/agents/agent/").content.decode()
    assert "tenant__id__exact" in both and f"tenant__id__exact={acme.pk}" in both
    assert "globex-secret-merger" not in both

    root = signed_in(reviewer_user("root", superuser=True)).get("/admin/agents/agent/").content.decode()
    assert f"tenant__id__exact={secret.pk}" in root
