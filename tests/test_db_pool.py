"""A pool of database connections (DB_POOL_MAX_SIZE) under an ASGI server: requests of two tenants take turns on
one pooled connection, and each sees only its own tenant's rows."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.db import connection

from agents.services import agent_key_create
from learning.catalogue import VerbEntry
from learning.services.catalogue import verb_catalogue_load
from tenants.context import tenant_scope
from tenants.services import tenant_create
from tests.conftest import CBU_CATALOGUE, asgi_server
from tests.test_mcp_stdio import server_env

pytestmark = pytest.mark.django_db(transaction=True)

MAIL_CATALOGUE = [
    VerbEntry("mail.send", "mail", "Send mail", "Send an email.", ["send an email", "write a message to someone"]),
    VerbEntry("mail.read", "mail", "Read mail", "Read the inbox.", ["read my inbox", "show my new emails"]),
]


@pytest.fixture(scope="module")
def pooled_url(django_db_setup):
    """uvicorn serving config.asgi with a pool of one connection, on the test database."""
    with asgi_server(server_env(DB_POOL_MAX_SIZE="1", DB_POOL_MIN_SIZE="1")) as url:
        yield url


def _server_connections() -> int:
    """Client connections to the test database other than this test's own (an autovacuum worker on it is no
    connection of the server's, and comes and goes)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        return cursor.fetchone()[0]


def test_two_tenants_take_turns_on_one_pooled_connection_and_see_only_their_own(pooled_url):
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    with tenant_scope([acme.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
    with tenant_scope([globex.pk]):
        verb_catalogue_load(entries=MAIL_CATALOGUE)
    _, raw_a = agent_key_create(agent_name="agent-a", scopes=["resolve", "feedback"], tenant=acme)
    _, raw_b = agent_key_create(agent_name="agent-b", scopes=["resolve", "feedback"], tenant=globex)
    baseline = _server_connections()

    def resolve(raw: str, text: str) -> dict:
        answer = requests.post(
            f"{pooled_url}/api/v1/resolve",
            json={"text": text, "user_id": "alice"},
            headers={"Authorization": f"Bearer {raw}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    # acme teaches alice a phrase; globex's alice is another user with the same id
    taught = requests.post(
        f"{pooled_url}/api/v1/resolutions/correct",
        json={"text": "spin up a fresh client book", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"},
        headers={"Authorization": f"Bearer {raw_a}"},
        timeout=60,
    )
    assert taught.status_code == 200, taught.text

    turns = [(raw_a, "cbu overview"), (raw_b, "read my inbox"), (raw_a, "spin up a fresh client book")] * 3
    turns += [(raw_b, "spin up a fresh client book"), (raw_b, "cbu overview")]
    with ThreadPoolExecutor(max_workers=4) as pool:  # four at once, one connection: they queue for it
        answers = list(pool.map(lambda turn: resolve(*turn), turns))

    for (raw, text), answer in zip(turns, answers, strict=True):
        verbs = {answer.get("verb")} | {option["verb"] for option in answer.get("candidates") or []}
        if raw == raw_a:
            assert answer["verb"] == {"cbu overview": "cbu.list", "spin up a fresh client book": "cbu.delete"}[text]
            assert not any(verb and verb.startswith("mail.") for verb in verbs)
        else:
            assert not any(verb and verb.startswith("cbu.") for verb in verbs), answer
            if text == "read my inbox":
                assert answer["verb"] == "mail.read"
    assert _server_connections() - baseline <= 1  # the server held one connection, whatever the concurrency


def test_a_pooled_connection_the_database_dropped_fails_one_request_with_503_then_the_pool_heals(pooled_url):
    """Connections are lent unchecked (DB_POOL_CHECK off): after a database restart the first request on a dropped
    connection answers 503 with Retry-After (never a 500), the pool lets the connection go, and the retry works."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    _, raw = agent_key_create(agent_name="agent-a", scopes=["resolve"])

    def resolve():
        return requests.post(
            f"{pooled_url}/api/v1/resolve",
            json={"text": "cbu overview"},
            headers={"Authorization": f"Bearer {raw}"},
            timeout=60,
        )

    assert resolve().status_code == 200
    with connection.cursor() as cursor:  # what a restart does to the server's connections
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
    first = resolve()
    assert first.status_code == 503, first.text
    assert first.json()["code"] == "database_unavailable" and first.headers["Retry-After"] == "1"
    answers = [resolve() for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
