"""Input to the admin: a NUL byte in any form field, a date part no date can hold, or a selection that is not ids, is refused
with 400 before a view sees it."""

import pytest

from actions.models import Action
from tests.conftest import reviewer_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def stopper(client):
    user = reviewer_user("rita", "view_action", "approve_autonomytransition")
    client.force_login(user)
    return client


def _stop(reason: str, **extra) -> dict:
    action = Action.objects.get_or_create(name="card.freeze", defaults={"autonomy_level": 3})[0]
    return {"action": "emergency_stop", "_selected_action": [action.pk], "index": "0", "post": "yes", "reason": reason, **extra}


def test_nul_in_a_multipart_field_is_400_and_nothing_changes(stopper):
    response = stopper.post("/admin/actions/action/", _stop("stop\x00now"))
    assert response.status_code == 400
    assert "reason: The field contains a NUL character." in response.content.decode()
    assert Action.objects.get(name="card.freeze").autonomy_level == 3


def test_nul_in_a_form_encoded_field_name_is_400(stopper):
    Action.objects.create(name="card.freeze", autonomy_level=3)
    response = stopper.post(
        "/admin/inbox/", "bad%00name=1&reason=x", content_type="application/x-www-form-urlencoded; charset=utf-8"
    )
    assert response.status_code == 400 and "A field name contains a NUL character." in response.content.decode()


def test_nul_in_any_admin_form_is_400(stopper):
    for path, data in [
        ("/admin/inbox/proposal/1/", {"action": "reject", "category": "oth\x00er", "reason": "x"}),
        ("/admin/revert/rule/1/", {"reason": "why\x00"}),
        ("/admin/learning/learningcandidate/", {"action": "reject_selected", "_selected_action": ["1"], "reason": "r\x00"}),
    ]:
        assert stopper.post(path, data).status_code == 400, path


def test_clean_form_still_reaches_the_view(stopper):
    response = stopper.post("/admin/actions/action/", _stop("stop now"))
    assert response.status_code == 302
    assert Action.objects.get(name="card.freeze").autonomy_level == 1


def test_json_bodies_keep_the_api_answer(gov_api):
    """The API's JSON parser answers NUL in its own error shape; the middleware leaves JSON bodies alone."""
    response = gov_api.post(
        "/api/v1/blocklist", data=b'{"phrase": "a\\u0000b", "verb": "cbu.list"}', content_type="application/json"
    )
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
    form = gov_api.post("/api/v1/blocklist", {"phrase": "a\x00b", "verb": "cbu.list"})
    assert form.status_code == 415  # the API takes JSON only; the middleware did not read the form


@pytest.mark.parametrize("value", ["99999999", "0", "²", "abc", "-1", "9" * 5000])
def test_a_date_part_no_date_can_hold_is_400_not_500(admin_client, value):
    """The admin's date filters take ``<field>__year``; Django fails building the query for a year it cannot hold."""
    assert admin_client.get(f"/admin/agents/agent/?created_at__year={value}").status_code == 400
    assert admin_client.get("/admin/agents/agent/?created_at__year=2026").status_code == 200
    assert admin_client.get("/admin/agents/agent/?created_at__year=2026&created_at__month=13").status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        "decided_at__year=9999",
        "decided_at__year=9999&decided_at__month=12",
        "decided_at__year=9999&decided_at__month=12&decided_at__day=31",
        "decided_at__year=2025&decided_at__month=2&decided_at__day=30",
        "decided_at__year=2025&decided_at__month=4&decided_at__day=31",
    ],
)
def test_a_date_hierarchy_past_the_calendar_is_400_not_500(admin_client, query):
    """The date hierarchy filters up to the next year, month or day: that one must exist too."""
    assert admin_client.get(f"/admin/review/decision/?{query}").status_code == 400
    assert (
        admin_client.get("/admin/review/decision/?decided_at__year=9998&decided_at__month=12&decided_at__day=31").status_code
        == 200
    )
    assert (
        admin_client.get("/admin/review/decision/?decided_at__year=2024&decided_at__month=2&decided_at__day=29").status_code
        == 200
    )


@pytest.mark.parametrize("selected", ["abc", "", "1e5", "-1", "²", "9" * 20])
@pytest.mark.parametrize(
    "url,action",
    [
        ("/admin/auth/user/", "delete_selected"),  # Django's own admin fails on these too
        ("/admin/learning/learningcandidate/", "approve_selected"),
        ("/admin/feedback/correctionrule/", "deactivate_selected"),
        ("/admin/learning/decisionfit/", "pin_selected"),
    ],
)
def test_an_admin_action_on_a_selection_that_is_not_ids_is_400_not_500(admin_client, url, action, selected):
    from learning.models import LearningCandidate

    before = LearningCandidate.objects.count()
    answer = admin_client.post(url, {"action": action, "_selected_action": ["1", selected]})
    assert answer.status_code == 400 and "_selected_action" in answer.content.decode()
    assert LearningCandidate.objects.count() == before


def test_an_admin_action_on_real_ids_still_runs(admin_client):
    answer = admin_client.post("/admin/learning/learningcandidate/", {"action": "approve_selected", "_selected_action": [" 7"]})
    assert answer.status_code == 200  # the action's own confirmation page: the selection reached it
    assert "<title>Approve and apply candidates" in answer.content.decode()


def _history_admins():
    from django.contrib import admin

    from common.admin import HistoryAdmin

    return [m for m, a in admin.site._registry.items() if isinstance(a, HistoryAdmin)]


def test_every_history_screen_answers_a_bad_id_with_404(admin_client):
    """simple_history looks the id up unchecked; an id that is not a key (``abc``, a NUL, a huge number) is 404, not 500."""
    models = _history_admins()
    assert len(models) >= 10
    for model in models:
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}"
        for bad in ("abc", "1.5", "-", "9" * 40):
            assert admin_client.get(f"{base}/{bad}/history/").status_code == 404, (model, bad)
            assert admin_client.get(f"{base}/{bad}/history/1/").status_code == 404, (model, bad)
        assert admin_client.get(f"{base}/%00/history/").status_code == 400, model  # a NUL in the path: the middleware
        assert admin_client.get(f"{base}/1/history/abc/").status_code == 404, model
        assert admin_client.get(f"{base}/987654/history/").status_code == 404, model  # a key of no record: still 404


def test_a_history_screen_still_shows_a_real_record(admin_client):
    action = Action.objects.create(name="card.freeze", autonomy_level=3)
    response = admin_client.get(f"/admin/actions/action/{action.pk}/history/")
    assert response.status_code == 200 and "card.freeze" in response.content.decode()
    version = action.history.latest().history_id
    assert admin_client.get(f"/admin/actions/action/{action.pk}/history/{version}/").status_code == 200


BAD_JSON = [
    ('{"to": NaN}', "Enter a valid JSON"),
    ('{"to": Infinity}', "Enter a valid JSON"),
    ('{"to": 1e999}', "Not a finite number"),
    ('{"to": "\\ud800"}', "lone UTF-16 surrogate"),
    ('{"\\udfff": 1}', "lone UTF-16 surrogate"),
    ('{"to": 99999999999999999999999999}', "outside 64 bits"),
    ('{"to": ' + "[" * 5000 + "]" * 5000 + "}", "Enter a valid JSON"),
    ('{"to": ' + '{"a": ' * 60 + "1" + "}" * 60 + "}", "nested deeper"),
]


def _superuser_client():
    from django.test import Client

    client = Client(raise_request_exception=False)
    client.force_login(reviewer_user("root", superuser=True))
    return client


@pytest.mark.parametrize("bad,said", BAD_JSON)
def test_an_admin_json_field_refuses_what_the_api_refuses_as_a_form_error(agent, bad, said, settings):
    """A proposal's modified action and an execution's corrected action: the API's input policy, shown on the form
    (not a 500, nothing decided), and the text shown again as typed."""
    from feedback.models import Execution, Proposal
    from tests.conftest import make_proposal

    settings.API_MAX_JSON_DEPTH = 32
    client = _superuser_client()
    proposal = make_proposal(agent)
    answer = client.post(
        f"/admin/feedback/proposal/{proposal.pk}/change/", {"decision": "modify", "new_action": bad, "notes": "n", "category": ""}
    )
    assert answer.status_code == 200 and said in answer.content.decode(), answer.status_code
    assert Proposal.objects.get(pk=proposal.pk).status == "pending"
    action = Action.objects.get_or_create(name="email.send")[0]
    execution = Execution.objects.create(agent=agent, action=action, confidence=0.9, success=True)
    answer = client.post(
        f"/admin/feedback/execution/{execution.pk}/change/",
        {"outcome": "incorrect", "corrected": bad, "notes": "n", "category": ""},
    )
    assert answer.status_code == 200 and said in answer.content.decode(), answer.status_code
    assert Execution.objects.get(pk=execution.pk).review_outcome in ("", None)


@pytest.mark.parametrize("value", ["abc", "1e999", "²"])
def test_a_membership_whose_user_is_no_key_is_a_form_error_not_500(db, value):
    from tenants.models import Membership
    from tenants.selectors import tenant_default

    client = _superuser_client()
    before = Membership.objects.count()
    answer = client.post("/admin/tenants/membership/add/", {"user": value, "tenant": tenant_default().pk})
    assert answer.status_code == 200 and "errorlist" in answer.content.decode(), answer.status_code
    assert Membership.objects.count() == before
