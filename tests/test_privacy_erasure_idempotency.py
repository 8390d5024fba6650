"""An erasure erases the stored answers of idempotent requests that named the user: a retry with the key gets a
410 saying the write is gone (it is not applied again), over REST and MCP; other users' answers stay."""

import pytest

from agents.models import IdempotentRequest
from agents.services import idempotent_answers_of_user_erase
from learning.models import LearnedPhrase
from mcp_server.server import Outcome, call_tool_sync, error_body
from tenants.context import tenant_request, tenant_scope
from tenants.selectors import tenant_default
from tests.conftest import make_client
from tests.test_privacy_erasure import _erase

pytestmark = pytest.mark.django_db

CONFIRM = "/api/v1/resolutions/confirm"
BODY = {"text": "show me every client business unit", "verb": "cbu.list"}


def _confirm(api, user_id: str, key: str):
    return api.post(CONFIRM, {**BODY, "user_id": user_id}, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_retry_after_the_erasure_learns_the_write_is_gone_and_applies_nothing(catalogue):
    api = make_client(["resolve", "feedback"])
    first = _confirm(api, "alice", "alice-1")
    assert first.status_code == 200 and "show me every client" in first.content.decode()
    assert _confirm(api, "bob", "bob-1").status_code == 200
    assert IdempotentRequest.objects.get(key="alice-1").user_ids == ["alice"]

    counted = _erase(user_id="alice", dry_run=True)
    assert counted["idempotent_answers_erased"] == 1
    assert IdempotentRequest.objects.get(key="alice-1").status_code == 200  # a dry run changes nothing
    erased = _erase(user_id="alice")
    assert erased["idempotent_answers_erased"] == 1
    stored = IdempotentRequest.objects.get(key="alice-1")
    assert stored.status_code == 410 and stored.user_ids == [] and "show me" not in str(stored.response)

    retry = _confirm(api, "alice", "alice-1")
    assert retry.status_code == 410 and retry["Idempotent-Replayed"] == "true"
    assert retry.json()["code"] == "erased" and "new idempotency key" in retry.json()["detail"]
    assert not LearnedPhrase.objects.filter(user_id="alice").exists()  # the retry applied nothing
    bobs = _confirm(api, "bob", "bob-1")
    assert bobs.status_code == 200 and bobs.json() == IdempotentRequest.objects.get(key="bob-1").response
    assert _confirm(api, "alice", "alice-2").status_code == 200  # a new key applies it again


def test_an_answer_that_names_the_user_anywhere_goes_and_one_that_does_not_stays(db):
    """The users an answer names at any depth are kept with it when it is stored (an indexed array, so an erasure
    never reads the stored answers), beside the one the request's body named."""
    from agents.services import idempotent_request_claim, idempotent_request_store

    agent = make_client(["resolve"]).key.agent
    answers = {
        "nested": (None, {"request": {"options": [{"verb": "x"}], "user_id": "alice"}}),
        "in a list": (None, {"items": [{"user_id": "bob"}, {"user_id": "alice"}]}),
        "the body named her": ("alice", {"ok": True}),
        "another user": ("bob", {"user_id": "alice2"}),
        "a text that quotes her id": (None, {"note": "alice"}),
        "no answer body": ("carol", None),
        "not an id": (None, {"user_id": ["alice"], "x": {"user_id": "two words"}}),
    }
    for key, (sent, response) in answers.items():
        idempotent_request_claim(agent=agent, key=key, method="POST", path="/x", request_hash=key, user_id=sent)
        idempotent_request_store(agent=agent, key=key, status_code=200, response=response)
    idempotent_request_claim(agent=agent, key="pending", method="POST", path="/x", request_hash="p", user_id="alice")
    named = dict(IdempotentRequest.objects.values_list("key", "user_ids"))
    assert named["in a list"] == ["bob", "alice"] and named["another user"] == ["bob", "alice2"]
    assert named["not an id"] == [] and named["no answer body"] == ["carol"]
    with tenant_scope([tenant_default().pk]):
        assert idempotent_answers_of_user_erase(user_id="alice", dry_run=True) == 3
        assert idempotent_answers_of_user_erase(user_id="alice") == 3
        assert idempotent_answers_of_user_erase(user_id="alice") == 0  # nothing of hers is left
    gone = set(IdempotentRequest.objects.filter(status_code=410).values_list("key", flat=True))
    assert gone == {"nested", "in a list", "the body named her"}
    assert IdempotentRequest.objects.get(key="pending").status_code is None  # a claim whose request is under way


def test_a_claim_keeps_only_a_user_id(db):
    """What a body's ``user_id`` holds is kept only when it is a user id (surrounding spaces trimmed, as the
    request's own field trims them): the request itself answers a bad one."""
    from agents.services import idempotent_request_claim

    agent = make_client(["resolve"]).key.agent
    sent = {"k1": None, "k2": ["alice"], "k3": "two words", "k4": "x" * 129, "k5": 7, "k6": " alice@example.com "}
    for key, user_id in sent.items():
        assert idempotent_request_claim(agent=agent, key=key, method="POST", path="/x", request_hash=key, user_id=user_id) is None
    kept = dict(IdempotentRequest.objects.values_list("key", "user_ids"))
    assert kept == {"k1": [], "k2": [], "k3": [], "k4": [], "k5": [], "k6": ["alice@example.com"]}


def test_an_mcp_retry_after_the_erasure_is_an_error_not_a_replay(catalogue):
    api = make_client(["resolve", "feedback"])

    def confirm(key):
        try:
            with tenant_request():
                return call_tool_sync("confirm_resolution", f"Bearer {api.raw}", "test", {**BODY, "user_id": "alice"}, key)
        except Exception as exc:  # noqa: BLE001
            return Outcome(error=error_body(exc))

    assert confirm("m-1").error is None
    assert IdempotentRequest.objects.get(key="m-1").user_ids == ["alice"]
    _erase(user_id="alice")
    retry = confirm("m-1")
    assert retry.data is None and not retry.replayed
    assert retry.error["http_status"] == 410 and retry.error["code"] == "erased"
    assert not LearnedPhrase.objects.filter(user_id="alice").exists()
