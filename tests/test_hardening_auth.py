"""Throttling that cannot be turned against users: failures are limited per client address and per presented
key prefix, the address comes from trusted proxies only, a valid key is never refused because others failed,
and each key has a request rate (429 with Retry-After)."""

import pytest
from django.core.cache import cache
from django.test import RequestFactory

from agents.authentication import client_ip
from tests.conftest import make_client

URL = "/api/v1/resolve"
BODY = {"text": "list all cbus"}


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()
    yield
    cache.clear()


def _post(client, key, **extra):
    return client.post(URL, BODY, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}", **extra)


def _raw(api):
    return api._credentials["HTTP_AUTHORIZATION"].split()[1]


def test_bad_keys_from_an_address_never_lock_out_a_valid_key(client, catalogue, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "30/min"}}
    good = _raw(make_client(["resolve"], name="victim"))
    codes = [_post(client, f"alg_{i:08x}_guess{i}", REMOTE_ADDR="203.0.113.7").status_code for i in range(40)]
    assert codes[:30] == [401] * 30 and set(codes[30:]) == {429}
    throttled = _post(client, "alg_deadbeef_more", REMOTE_ADDR="203.0.113.7")
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) > 0
    assert _post(client, good, REMOTE_ADDR="203.0.113.7").status_code == 200  # the same address, a valid key


def test_wrong_reviewer_tokens_count_against_the_address_as_wrong_keys_do(client, catalogue, settings):
    from rest_framework.authtoken.models import Token

    from tests.conftest import reviewer_user

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "5/min"}}
    token = Token.objects.create(user=reviewer_user("rita", "view_learningcandidate", "review_learningcandidate"))

    def get(key, address):  # a decision on a candidate that does not exist: 404 once authenticated
        return client.post(
            "/api/v1/learning/candidates/999/approve",
            {},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {key}",
            REMOTE_ADDR=address,
        )

    codes = [get(f"{i:040x}", "203.0.113.7").status_code for i in range(8)]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
    assert get(token.key, "203.0.113.7").status_code == 404  # a valid token is never refused because others failed
    assert get(f"{99:040x}", "192.0.2.1").status_code == 401  # another address has its own budget


def test_a_reviewer_token_has_the_request_rate_of_a_key(client, catalogue, settings):
    from rest_framework.authtoken.models import Token

    from tests.conftest import reviewer_user

    settings.API_KEY_RATE = "3/min"
    rita = Token.objects.create(user=reviewer_user("rita", "view_learningcandidate", "review_learningcandidate"))
    sam = Token.objects.create(user=reviewer_user("sam", "view_learningcandidate", "review_learningcandidate"))

    def post(token):
        return client.post(
            "/api/v1/learning/candidates/999/approve",
            {},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {token.key}",
        )

    codes = [post(rita).status_code for _ in range(4)]
    assert codes == [404, 404, 404, 429]
    assert post(sam).status_code == 404  # per reviewer


def test_failures_are_also_limited_per_presented_prefix(client, catalogue, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "5/min"}}
    api = make_client(["resolve"], name="target")
    good = _raw(api)
    prefix = good.split("_")[1]
    # A distributed guesser: every attempt from another address, all aimed at one key's prefix.
    codes = [_post(client, f"alg_{prefix}_wrong{i}", REMOTE_ADDR=f"198.51.100.{i}").status_code for i in range(8)]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
    assert _post(client, good, REMOTE_ADDR="198.51.100.200").status_code == 200  # the key's owner is not refused
    other = _raw(make_client(["resolve"], name="bystander"))
    assert _post(client, f"alg_{other.split('_')[1]}_wrong", REMOTE_ADDR="192.0.2.1").status_code == 401


def test_x_forwarded_for_is_believed_only_from_trusted_proxies(settings):
    rf = RequestFactory()
    settings.TRUSTED_PROXIES = []
    assert client_ip(rf.get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="1.2.3.4")) == "10.0.0.5"
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert client_ip(rf.get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="1.2.3.4")) == "1.2.3.4"
    # A client cannot pick its address by writing X-Forwarded-For itself: the proxy appends the real one.
    assert client_ip(rf.get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="6.6.6.6, 1.2.3.4")) == "1.2.3.4"
    assert client_ip(rf.get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="1.2.3.4, 10.0.0.9")) == "1.2.3.4"
    # Not from a trusted proxy: the header is ignored.
    assert client_ip(rf.get("/", REMOTE_ADDR="192.0.2.9", HTTP_X_FORWARDED_FOR="1.2.3.4")) == "192.0.2.9"
    assert client_ip(rf.get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="not-an-ip")) == "10.0.0.5"


def test_spoofed_forwarded_addresses_do_not_spread_failures(client, catalogue, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failures": "3/min"}}
    settings.TRUSTED_PROXIES = []
    codes = [
        _post(client, f"alg_{i:08x}_x", REMOTE_ADDR="192.0.2.50", HTTP_X_FORWARDED_FOR=f"1.1.1.{i}").status_code for i in range(5)
    ]
    assert codes[-1] == 429  # counted against the real address, whatever the header says


def test_each_key_has_a_request_rate(catalogue, settings):
    settings.API_KEY_RATE = "3/min"
    busy, calm = make_client(["resolve"], name="busy"), make_client(["resolve"], name="calm")
    codes = [busy.post(URL, BODY, format="json").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = busy.post(URL, BODY, format="json")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.json()["code"] == "throttled"
    assert calm.post(URL, BODY, format="json").status_code == 200


def test_no_key_rate_when_unset(api, catalogue, settings):
    settings.API_KEY_RATE = ""
    assert all(api.post(URL, BODY, format="json").status_code == 200 for _ in range(5))
