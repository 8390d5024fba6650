"""Input limits (body size, JSON depth) and the broker-down fallback."""

import json

import pytest
from celery import Celery, shared_task

from config.celery import app, enqueue

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


def test_enqueue_eager_without_broker():
    RAN.clear()
    assert app.conf.task_always_eager
    assert enqueue(record_call, 3) is True
    assert RAN == [3]
