"""Input limits (body size, JSON depth) and the broker-down fallback."""

import json

import pytest
from celery import Celery, shared_task

from common.tasks import task_send as enqueue
from config.celery import app

pytestmark = pytest.mark.django_db
URL = "/api/v1/resolve"


def test_body_over_the_limit_is_413_naming_the_body(api, catalogue, settings):
    settings.API_MAX_BODY_BYTES = 1000
    r = api.post(URL, json.dumps({"text": "x" * 2000}), content_type="application/json")
    assert r.status_code == 413
    assert "body" in r.json()["fields"]


def test_json_nested_too_deep_is_400(api, catalogue, settings):
    settings.API_MAX_JSON_DEPTH = 5
    deep = {"text": "list all cbus", "x": [[[[[[[1]]]]]]]}
    r = api.post(URL, json.dumps(deep), content_type="application/json")
    assert r.status_code == 400
    assert "deeper" in r.json()["fields"]["body"][0]


def test_very_deep_json_does_not_crash(api, catalogue):
    r = api.post(URL, "[" * 100000 + "]" * 100000, content_type="application/json")
    assert r.status_code in (400, 413)


def test_nan_is_not_json(api, catalogue):
    r = api.post(URL, '{"text": "list", "limit": NaN}', content_type="application/json")
    assert r.status_code == 400


RAN = []

# An app whose broker is down: nothing listens on port 1.
down = Celery("down", broker="redis://127.0.0.1:1/0", set_as_current=False)
down.conf.broker_connection_retry_on_startup = False
down.conf.broker_transport_options = {"socket_connect_timeout": 0.5, "max_retries": 0}


@down.task(name="tests.record_call_down")
def record_call_down(value):
    RAN.append(value)


@shared_task(name="tests.record_call")
def record_call(value):
    RAN.append(value)


def test_enqueue_runs_inline_when_the_broker_is_down(settings):
    RAN.clear()
    settings.CELERY_FALLBACK_INLINE = True
    assert enqueue(record_call_down, 1) is False
    assert RAN == [1]
    settings.CELERY_FALLBACK_INLINE = False
    assert enqueue(record_call_down, 2) is False
    assert RAN == [1]
    # work too long for a request (the catalogue prior's refit) is left to its periodic sweep even when inline is on
    settings.CELERY_FALLBACK_INLINE = True
    assert enqueue(record_call_down, 3, fallback_inline=False) is False
    assert RAN == [1]


def test_enqueue_eager_without_broker():
    RAN.clear()
    assert app.conf.task_always_eager
    assert enqueue(record_call, 3) is True
    assert RAN == [3]


@pytest.mark.django_db(transaction=True)
def test_connection_dropped_mid_request_fails_cleanly_and_a_retry_succeeds():
    import psycopg
    from django.db import close_old_connections, connection

    from learning.models import LearnedPhrase
    from learning.services.catalogue import verb_catalogue_load
    from tests.conftest import CATALOGUE, make_client

    verb_catalogue_load(entries=CATALOGUE)
    client = make_client(["resolve", "feedback"])
    body = {"text": "tidy up the units", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"}
    params = connection.get_connection_params()
    killed = []

    def kill_after_first_insert(execute, sql, params_, many, context):
        result = execute(sql, params_, many, context)
        if not killed and sql.lstrip().upper().startswith("INSERT"):
            pid = context["connection"].connection.info.backend_pid
            with psycopg.connect(host=params["host"], dbname="postgres", user=params["user"], autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            killed.append(pid)
        return result

    with connection.execute_wrapper(kill_after_first_insert):
        response = client.post("/api/v1/resolutions/correct", body, format="json")
    assert killed, "the request wrote nothing before the connection dropped"
    assert response.status_code == 503
    assert response.json()["code"] == "database_unavailable"
    close_old_connections()  # what the end of a real request does with a broken connection
    connection.close()
    assert LearnedPhrase.objects.filter(normalized="tidy up the units").count() == 0

    retry = client.post("/api/v1/resolutions/correct", body, format="json")
    assert retry.status_code == 200, retry.content
    assert LearnedPhrase.objects.get(normalized="tidy up the units", user_id="alice").verb.name == "cbu.delete"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("nth", [1, 2, 4])
@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize(
    "path,body",
    [
        ("/api/v1/resolve", {"text": "show me the units", "user_id": "alice"}),
        ("/api/v1/memories/retrieve", {"user_id": "alice", "query": "how are the logs rotated"}),
    ],
)
def test_a_connection_lost_at_any_read_is_503_with_retry_after_never_500(path, body, nth, idempotent):
    """The connection dropped after the request's nth SELECT: the first (the tenant setting, opening the request's
    transaction) and the last (closing it) are outside DRF's exception handler; each answers 503."""
    import psycopg
    from django.db import close_old_connections, connection

    from learning.services.catalogue import verb_catalogue_load
    from tests.conftest import CATALOGUE, make_client

    verb_catalogue_load(entries=CATALOGUE)
    client = make_client(["resolve", "feedback"])
    params = connection.get_connection_params()
    selects = []

    def kill_after_nth_select(execute, sql, params_, many, context):
        result = execute(sql, params_, many, context)
        if sql.lstrip().upper().startswith("SELECT"):
            selects.append(sql)
            if len(selects) == nth:
                pid = context["connection"].connection.info.backend_pid
                with psycopg.connect(host=params["host"], dbname="postgres", user=params["user"], autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        return result

    headers = {"HTTP_IDEMPOTENCY_KEY": f"lost-{nth}"} if idempotent else {}
    with connection.execute_wrapper(kill_after_nth_select):
        response = client.post(path, body, format="json", **headers)
    assert len(selects) >= nth
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "database_unavailable" and response["Retry-After"] == "1"
    close_old_connections()
    connection.close()
    retry = client.post(path, body, format="json", **headers)
    assert retry.status_code == 200, retry.content
