"""Agent API keys: authentication, revocation, the verified-key cache, scopes, throttling, hashed storage."""

import pytest

from tests.conftest import make_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/resolve"


def test_missing_and_wrong_keys(client, catalogue):
    r = client.post(URL, {"text": "list all cbus"}, content_type="application/json")
    assert r.status_code == 401
    r = client.post(URL, {"text": "list all cbus"}, content_type="application/json", HTTP_AUTHORIZATION="Bearer alg_nope")
    assert r.status_code == 401
    assert r.json()["detail"]
    r = client.post(URL, {"text": "list all cbus"}, content_type="application/json", HTTP_AUTHORIZATION="Token abc")
    assert r.status_code == 401


def test_revoked_key_is_refused(api, catalogue):
    from agents.services import api_key_revoke

    api_key_revoke(key=api.key)
    assert api.post(URL, {"text": "list all cbus"}, format="json").status_code == 401


def test_verified_keys_are_remembered_briefly_and_revocation_elsewhere_lands_within_the_ttl(
    api, catalogue, settings, django_assert_num_queries, monkeypatch
):
    """A verified key costs no query for API_KEY_CACHE_S; a revocation written by another process (straight to
    the database here) is honoured once that time has passed; with 0 every request looks the key up.

    The cache's clock only moves when the test moves it: on a loaded machine the requests themselves could take
    longer than the TTL, and the key would be looked up again before the test means it to be."""
    import time
    from types import SimpleNamespace

    from django.utils import timezone

    from agents import authentication
    from agents.models import ApiKey

    clock = [time.monotonic()]
    monkeypatch.setattr(authentication, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    settings.API_KEY_CACHE_S = 0.3
    body = {"text": "list all cbus"}  # an exact catalogue phrase: the resolver's own queries are fixed
    assert api.post(URL, body, format="json").status_code == 200
    # The resolver's two (exact phrases with the catalogue's version: the catalogue itself is kept in process
    # memory, the tier query; both prepared), and the resolution record (SET LOCAL synchronous_commit and the
    # INSERT, one pipeline: one round trip, in the request's transaction, no savepoint); the request's tenant
    # transaction (savepoint, read the setting, no tenant, the key's tenant, restore, release; outside a test
    # transaction: one set_config of the key's tenant, sent with the BEGIN, and "no tenant" when the process
    # default is not "none"); no second tier statement (the few global learned phrases are compared exactly in
    # the one tier query, not walked in an index that comes back short); no key lookup.
    with django_assert_num_queries(10):
        assert api.post(URL, body, format="json").status_code == 200
    ApiKey.objects.filter(pk=api.key.pk).update(revoked_at=timezone.now())  # as another process would
    assert api.post(URL, body, format="json").status_code == 200  # still remembered here ...
    clock[0] += 0.35
    assert api.post(URL, body, format="json").status_code == 401  # ... not past the TTL
    assert api.post(URL, body, format="json").status_code == 401  # and a failure is never remembered as a success

    other = make_client(["resolve"], name="uncached")
    settings.API_KEY_CACHE_S = 0
    assert other.post(URL, body, format="json").status_code == 200
    ApiKey.objects.filter(pk=other.key.pk).update(revoked_at=timezone.now())
    assert other.post(URL, body, format="json").status_code == 401


def test_admin_edit_of_an_agent_takes_effect_at_once(api, catalogue, admin_client, django_capture_on_commit_callbacks):
    body = {"text": "list all cbus"}
    assert api.post(URL, body, format="json").status_code == 200
    agent = api.agent
    with django_capture_on_commit_callbacks(execute=True) as committed:  # the keys are forgotten once the edit commits
        r = admin_client.post(
            f"/admin/agents/agent/{agent.pk}/change/",
            {
                "name": agent.name,
                "description": agent.description,
                "is_active": "",
                "keys-TOTAL_FORMS": "1",
                "keys-INITIAL_FORMS": "1",
                "keys-MIN_NUM_FORMS": "0",
                "keys-MAX_NUM_FORMS": "1000",
                "keys-0-id": str(api.key.pk),
                "keys-0-agent": str(agent.pk),
            },
        )
    assert r.status_code == 302, r.content[:2000]
    assert committed
    assert api.post(URL, body, format="json").status_code == 401


def test_key_without_resolve_scope_is_forbidden(db, catalogue):
    client = make_client(["feedback"], name="feedback-only")
    r = client.post(URL, {"text": "list all cbus"}, format="json")
    assert r.status_code == 403
    assert "resolve" in r.json()["detail"]


def test_failed_authentications_are_throttled(client, catalogue, settings):
    from django.core.cache import cache

    cache.clear()
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "3/min"}}
    codes = [
        client.post(URL, {"text": "x"}, content_type="application/json", HTTP_AUTHORIZATION="Bearer wrong").status_code
        for _ in range(5)
    ]
    assert codes[:3] == [401, 401, 401]
    assert codes[-1] == 429
    cache.clear()


def test_only_key_hash_is_stored(api):
    from agents.models import ApiKey

    key = ApiKey.objects.get(pk=api.key.pk)
    raw = api._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert raw not in (key.key_hash, key.prefix, key.name)
    assert len(key.key_hash) == 64
