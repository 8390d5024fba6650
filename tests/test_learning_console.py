"""The disambiguation console: session login, CSRF, the same services as the API, and a real browser."""

import json
import time
import uuid

import pytest
from django.test import Client

from learning.models import AbandonEvent, DisambiguationRequest, LearningSignal, ResolutionRecord
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_CATALOGUE, reviewer_user


@pytest.fixture
def person(db):
    return reviewer_user("alice", password="s3cret-pass")


def test_console_needs_a_session_login(client):
    response = client.get("/console/")
    assert response.status_code == 302 and response["Location"].startswith("/console/login/")
    assert client.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json").status_code == 403


def test_console_page_renders_for_a_signed_in_person(client, person):
    client.login(username="alice", password="s3cret-pass")
    page = client.get("/console/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="text"' in html and "sendBeacon" in html and "typed_new_input" in html and "csrftoken" in page.cookies


def test_console_endpoints_enforce_csrf_and_use_the_same_services(person, cbus, django_capture_on_commit_callbacks):
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="alice", password="s3cret-pass")
    page = browser.get("/console/")
    token = page.cookies["csrftoken"].value
    refused = browser.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json")
    assert refused.status_code == 403
    body = browser.post(
        "/console/api/resolve", {"text": "list all cbus"}, content_type="application/json", HTTP_X_CSRFTOKEN=token
    ).json()
    assert body["outcome"] == "ambiguous"
    row = DisambiguationRequest.objects.get(request_id=body["request_id"])
    assert (row.channel, row.user_id, row.agent) == ("console", "console:alice", None)

    with django_capture_on_commit_callbacks(execute=True):
        chosen = browser.post(
            f"/console/api/disambiguations/{row.request_id}/select",
            {"selected_verb": "cbu.list"},
            content_type="application/json",
            HTTP_X_CSRFTOKEN=token,
        )
    assert chosen.status_code == 200 and chosen.json()["selected_verb"] == "cbu.list"
    assert LearningSignal.objects.filter(request=row, outcome="selected_alt", verb="cbu.list", user_id="console:alice").exists()
    record = ResolutionRecord.objects.get(request_id=row.request_id)  # the console's answers label the decision too
    assert record.user_id == "console:alice" and record.gold_verb == "cbu.list" and record.label is not None
    again = browser.post(
        f"/console/api/disambiguations/{row.request_id}/select",
        {"selected_verb": "cbu.show"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert again.status_code == 409 and again.json()["selected_verb"] == "cbu.list"


def test_console_cannot_answer_an_agents_request(person, cbus, api):
    body = api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    browser = Client()
    browser.login(username="alice", password="s3cret-pass")
    response = browser.post(
        f"/console/api/disambiguations/{body['request_id']}/abandon", {"reason": "timeout"}, content_type="application/json"
    )
    assert response.status_code == 404
    assert DisambiguationRequest.objects.get(request_id=body["request_id"]).status == "open"


def test_beacon_style_form_post_abandons(person, cbus):
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="alice", password="s3cret-pass")
    token = browser.get("/console/").cookies["csrftoken"].value
    body = browser.post(
        "/console/api/resolve", {"text": "list all cbus"}, content_type="application/json", HTTP_X_CSRFTOKEN=token
    ).json()
    response = browser.post(
        f"/console/api/disambiguations/{body['request_id']}/abandon", {"reason": "closed_session", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 200
    assert AbandonEvent.objects.get(request__request_id=body["request_id"]).reason == "closed_session"


# --- a real browser ---------------------------------------------------------------


def _sign_in(page, live_server, username):
    reviewer_user(username, password="s3cret-pass")
    page.goto(f"{live_server.url}/console/")
    page.fill("#id_username", username)
    page.fill("#id_password", "s3cret-pass")
    page.press("#id_password", "Enter")
    page.wait_for_selector("#text")


def _ask(page, text):
    page.fill("#text", text)
    page.press("#text", "Enter")


def _wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_person_in_no_tenant_is_told_so_and_refused_not_answered_500(cbus):
    from django.contrib.auth import get_user_model

    from tenants.models import Membership

    nobody = get_user_model().objects.create_user("nomember", password="pw-1234-xyz", is_staff=True)
    assert not Membership.objects.filter(user=nobody).exists()
    browser = Client(raise_request_exception=False)
    browser.force_login(nobody)
    page = browser.get("/console/")
    assert (
        page.status_code == 403 and "belongs to no tenant" in page.content.decode() and 'id="text"' not in page.content.decode()
    )
    answer = browser.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json")
    assert answer.status_code == 403 and "no tenant" in answer.json()["detail"], answer.content
    assert not ResolutionRecord.objects.exists() and not DisambiguationRequest.objects.exists()


def test_console_bodies_pass_the_apis_input_policy(person, cbus, settings):
    """The console parses JSON with the API's parser: its depth, size and value limits (400 or 413, never a 500 or a
    stored value the API refuses)."""
    browser = Client(raise_request_exception=False)
    browser.login(username="alice", password="s3cret-pass")
    rid = browser.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json").json()["request_id"]
    url = f"/console/api/disambiguations/{rid}/select"
    for depth in (settings.API_MAX_JSON_DEPTH + 5, 5000):
        body = '{"selected_verb": "cbu.list", "args": ' + '{"a":' * depth + "1" + "}" * depth + "}"
        answer = browser.post(url, body, content_type="application/json")
        assert answer.status_code == 400, (depth, answer.status_code)
    huge = '{"selected_verb": "cbu.list", "args": {"a": "' + "x" * (settings.API_MAX_BODY_BYTES + 1) + '"}}'
    assert browser.post(url, huge, content_type="application/json").status_code == 413
    assert DisambiguationRequest.objects.get(request_id=rid).status == "open"  # nothing was stored
    assert browser.post(url, {"selected_verb": "cbu.list", "args": {"a": 1}}, content_type="application/json").status_code == 200
    for invisible in ("\u200b\u200b", "\u3164"):  # text that shows nothing: refused as the API refuses it
        answer = browser.post("/console/api/resolve", {"text": invisible}, content_type="application/json")
        assert answer.status_code == 400 and "text" in answer.json()["fields"], answer.content
    assert ResolutionRecord.objects.count() == 1


def test_two_people_never_share_a_console_user_id(db):
    """A username a user id cannot hold acts as console:<pk>; a username of digits too, so no one can be named
    another person's fallback."""
    from django.contrib.auth import get_user_model

    from learning.console import console_user_id

    User = get_user_model()
    jose = User.objects.create_user("josé")
    named_like_his_pk = User.objects.create_user(str(jose.pk))
    plain = User.objects.create_user("bob")
    ids = {console_user_id(u) for u in (jose, named_like_his_pk, plain)}
    assert ids == {f"console:{jose.pk}", f"console:{named_like_his_pk.pk}", "console:bob"}


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_click_and_typed_new_input(live_server, browser_page):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    page = browser_page
    _sign_in(page, live_server, "alice")

    # Options open for one request; typing a new input over them abandons it.
    _ask(page, "my cbus please")
    page.wait_for_selector("button.option")
    first = DisambiguationRequest.objects.get(user_id="console:alice", normalized="my cbus please")
    _ask(page, "list all cbus")
    page.wait_for_selector("button.option[data-verb='cbu.list']")
    assert _wait_for(lambda: AbandonEvent.objects.filter(request=first).exists())
    assert AbandonEvent.objects.get(request=first).reason == "typed_new_input"
    assert LearningSignal.objects.filter(request=first, outcome="abandoned").count() == len(first.options)

    # A click records the gold label.
    page.click("button.option[data-verb='cbu.list']")
    page.wait_for_selector("#result.resolved")
    assert "cbu.list" in page.text_content("#result")
    second = DisambiguationRequest.objects.get(user_id="console:alice", normalized="list all cbus")
    assert second.status == "selected" and second.selected_verb == "cbu.list"
    signal = LearningSignal.objects.get(request=second, outcome="selected_alt")
    assert (signal.verb, signal.confidence, signal.source) == ("cbu.list", 0.95, "user_disambiguation")

    # The loop closed: the same input now resolves without options.
    _ask(page, "list all cbus")
    page.wait_for_function("document.querySelector('#result').textContent.includes('Resolved to cbu.list')")
    assert page.locator("button.option").count() == 0


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_keyboard_choice_timeout_and_closed_session(live_server, browser_page, settings):
    settings.CONSOLE_TIMEOUT_S = 2
    verb_catalogue_load(entries=CBU_CATALOGUE)
    page = browser_page
    _sign_in(page, live_server, "bob")

    # Leaving the page with options open: the beacon abandons with "closed_session".
    _ask(page, "list cbus")
    page.wait_for_selector("button.option")
    left = DisambiguationRequest.objects.get(user_id="console:bob", normalized="list cbus")
    page.goto("about:blank")
    assert _wait_for(lambda: AbandonEvent.objects.filter(request=left).exists(), timeout=10)
    assert AbandonEvent.objects.get(request=left).reason == "closed_session"

    # No choice within the timeout: abandoned with "timeout".
    page.goto(f"{live_server.url}/console/")
    _ask(page, "my cbus please")
    page.wait_for_selector("button.option")
    timed = DisambiguationRequest.objects.get(user_id="console:bob", normalized="my cbus please")
    assert _wait_for(lambda: AbandonEvent.objects.filter(request=timed).exists(), timeout=10)
    assert AbandonEvent.objects.get(request=timed).reason == "timeout"
    page.wait_for_function("document.querySelectorAll('button.option').length === 0")

    # Keyboard only: the first option has focus; "2" picks the second one.
    _ask(page, "list all cbus")
    page.wait_for_selector("button.option")
    assert page.evaluate("document.activeElement.classList.contains('option')")
    page.keyboard.press("ArrowDown")
    second_verb = page.evaluate("document.activeElement.dataset.verb")
    assert second_verb == page.locator("button.option").nth(1).get_attribute("data-verb")
    page.keyboard.press("Enter")
    page.wait_for_selector("#result.resolved")
    row = DisambiguationRequest.objects.get(user_id="console:bob", normalized="list all cbus")
    assert row.status == "selected" and row.selected_verb == second_verb


def test_a_console_answer_with_an_error_keeps_nothing_the_request_wrote(person, cbus, monkeypatch):
    from django.db import transaction

    from common.api import ApplicationError
    from learning import console

    def stores_then_refuses(**kwargs):
        with transaction.atomic():
            ResolutionRecord.objects.create(request_id=uuid.uuid4(), text="half", normalized="half", outcome="resolved")
        raise ApplicationError("Refused after a write.", field="text")

    monkeypatch.setattr(console, "resolution_store", stores_then_refuses)
    browser = Client()
    browser.login(username="alice", password="s3cret-pass")
    answer = browser.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json")
    assert answer.status_code == 400 and not ResolutionRecord.objects.filter(text="half").exists()


def test_no_agent_acts_as_a_console_user_but_the_erasure_reaches_them(person, cbus):
    from tests.conftest import make_client, reviewer_client
    from tests.test_mcp_policies import mcp_call

    client = Client()
    client.login(username="alice", password="s3cret-pass")
    assert client.post("/console/api/resolve", {"text": "list all cbus"}, content_type="application/json").status_code == 200
    agent = make_client(["resolve", "feedback", "governance"])
    for path, body in (
        ("/api/v1/resolve", {"text": "list all cbus", "user_id": "console:alice"}),
        (
            "/api/v1/resolutions/correct",
            {"text": "list all cbus", "user_id": "console:alice", "wrong_verb": "cbu.show", "correct_verb": "cbu.list"},
        ),
        ("/api/v1/memories/observe", {"user_id": "console:alice", "user_message": "q", "assistant_message": "an answer"}),
    ):
        refused = agent.post(path, body, format="json")
        assert refused.status_code == 400, (path, refused.content)
        assert "console" in refused.json()["fields"]["user_id"][0]
    assert agent.get("/api/v1/learning/candidates", {"user_id": "console:alice"}).status_code == 200  # review reads them
    assert agent.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "Console:alice"}, format="json").status_code == 200
    called = mcp_call("resolve", agent.raw, {"text": "list all cbus", "user_id": "console:alice"})
    assert called.error is not None and "user_id" in json.dumps(called.error)
    assert DisambiguationRequest.objects.filter(user_id="console:alice").count() == 1  # the console's own request only

    eraser = reviewer_client(reviewer_user("dora", superuser=True))
    erased = eraser.post("/api/v1/users/erase", {"user_id": "console:alice"}, format="json")
    assert erased.status_code == 200, erased.content
    assert not DisambiguationRequest.objects.filter(user_id="console:alice").exists()
