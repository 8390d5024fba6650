"""An action name several of a reviewer's tenants use: the emergency stop refuses to guess and takes the tenant."""

import pytest

from actions.models import Action, AutonomyLevel
from actions.selectors import action_get
from common.api import Conflict, NotFound
from tenants.context import tenant_scope
from tenants.models import Membership
from tenants.services import membership_add, tenant_create
from tests.conftest import reviewer_client, reviewer_user

pytestmark = pytest.mark.django_db

STOP = "/api/v1/actions/email.send/stop"


@pytest.fixture
def two():
    """email.send at level 3 in acme and in globex; a reviewer who is a member of both."""
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    actions = {}
    for t in (acme, globex):
        with tenant_scope([t.pk]):
            actions[t.slug] = Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.AUTONOMOUS, tenant=t)
    user = reviewer_user("rita", "approve_autonomytransition")
    membership_add(user=user, tenant=acme)
    membership_add(user=user, tenant=globex)
    return reviewer_client(user), actions


def levels(actions):
    return {slug: Action.objects.get(pk=a.pk).autonomy_level for slug, a in actions.items()}


def test_stop_of_a_name_in_two_of_the_reviewers_tenants_is_refused_as_ambiguous(two):
    rita, actions = two
    r = rita.post(STOP, {"reason": "wrong emails"}, format="json")
    assert r.status_code == 409, r.content
    body = r.json()
    assert body["code"] == "ambiguous"
    text = str(body)
    assert "acme" in text and "globex" in text and "tenant" in text
    assert levels(actions) == {"acme": 3, "globex": 3}  # nothing stopped


def test_stop_takes_the_tenant_in_the_query(two):
    rita, actions = two
    r = rita.post(STOP + "?tenant=globex", {"reason": "wrong emails"}, format="json")
    assert r.status_code == 200, r.content
    assert (r.data["from_level"], r.data["to_level"]) == (3, 1)
    assert levels(actions) == {"acme": 3, "globex": 1}


def test_stop_takes_the_tenant_in_the_body(two):
    rita, actions = two
    r = rita.post(STOP, {"reason": "wrong emails", "tenant": "acme"}, format="json")
    assert r.status_code == 200, r.content
    assert levels(actions) == {"acme": 1, "globex": 3}


def test_stop_refuses_two_different_tenants_and_a_tenant_that_is_not_the_reviewers(two):
    rita, actions = two
    r = rita.post(STOP + "?tenant=acme", {"reason": "x", "tenant": "globex"}, format="json")
    assert r.status_code == 400 and "tenant" in r.json()["fields"]
    tenant_create(slug="initech")
    assert rita.post(STOP + "?tenant=initech", {"reason": "x"}, format="json").status_code == 404
    assert rita.post(STOP + "?tenant=nope", {"reason": "x"}, format="json").status_code == 404
    assert rita.post(STOP + "?tenant=a%20b", {"reason": "x"}, format="json").status_code == 400
    assert rita.post(STOP + "?tenant=acme&other=1", {"reason": "x"}, format="json").status_code == 400
    assert levels(actions) == {"acme": 3, "globex": 3}


def test_a_reviewer_of_one_tenant_stops_its_action_without_naming_it(two):
    _rita, actions = two
    solo = reviewer_client(reviewer_user("sam", "approve_autonomytransition"))
    membership_add(user=solo.user, tenant=actions["acme"].tenant)
    Membership.objects.filter(user=solo.user).exclude(tenant=actions["acme"].tenant).delete()
    r = solo.post(STOP, {"reason": "wrong emails"}, format="json")
    assert r.status_code == 200, r.content
    assert levels(actions) == {"acme": 1, "globex": 3}


def test_the_stop_schema_documents_the_tenant(two):
    rita, _actions = two
    schema = rita.get("/api/schema/?format=json").json()
    post = schema["paths"]["/api/v1/actions/{name}/stop"]["post"]
    assert "tenant" in [p["name"] for p in post["parameters"] if p["in"] == "query"]
    assert "ambiguous" in post["description"]
    body = schema["components"]["schemas"][post["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]]
    assert "tenant" in body["properties"]


def test_action_get_refuses_a_name_in_several_tenants_and_takes_one(two):
    _rita, actions = two
    with pytest.raises(Conflict) as refused:
        action_get(name="email.send")
    assert refused.value.code == "ambiguous" and "acme, globex" in refused.value.message
    assert action_get(name="email.send", tenant="globex") == actions["globex"]
    with pytest.raises(NotFound):
        action_get(name="email.send", tenant="initech")
