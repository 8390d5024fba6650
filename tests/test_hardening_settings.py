"""Safe production settings: refuse to start without SECRET_KEY/ALLOWED_HOSTS when DEBUG is off, every
`check --deploy` warning cleared by a documented variable, CSP headers, and static files served by WhiteNoise."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
PROD = {
    "SECRET_KEY": "x7Qp2vLr9TzK4mWs8YbN3cFh6JdG1aRe5UkXo0PiVqSuMnEwZtByHgCjDlAfIrOs",
    "ALLOWED_HOSTS": "agents.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
    "SESSION_COOKIE_SECURE": "1",
    "CSRF_COOKIE_SECURE": "1",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
}


def _run(args, **env):
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "ALLOWED_HOSTS", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    base.update(DJANGO_SETTINGS_MODULE="config.settings", **env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


SETUP = ["-c", "import django; django.setup(); print('started')"]


@pytest.mark.parametrize(
    ("env", "missing"),
    [({}, "SECRET_KEY"), ({"SECRET_KEY": PROD["SECRET_KEY"]}, "ALLOWED_HOSTS"), ({"ALLOWED_HOSTS": "a.example"}, "SECRET_KEY")],
)
def test_refuses_to_start_without_secret_key_and_hosts_when_debug_is_off(env, missing):
    result = _run(SETUP, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and missing in result.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RESOLVE_FLOOR_Q_BLOCKLIST": "1.5"}, "blocklist_threshold"),  # out of range
        ({"RESOLVE_FLOOR_Q_MIN_SCORE": "0"}, "min_score"),
        ({"RESOLVE_PRIOR_MAX_TRAIN": "0"}, "RESOLVE_PRIOR_MAX_TRAIN"),
        ({"SERVER_TIMING": "maybe"}, "SERVER_TIMING"),  # unreadable: a typo must not switch a setting silently off
        ({"SESSION_COOKIE_SECURE": "ture"}, "SESSION_COOKIE_SECURE"),
        ({"RESOLVE_MAX_WRONG_RATE": "3%"}, "RESOLVE_MAX_WRONG_RATE"),
        ({"RESOLVE_MAX_WRONG_RATE": "nan"}, "RESOLVE_MAX_WRONG_RATE"),
        ({"RESOLVE_REFIT_EVERY_LABELS": "2.5"}, "RESOLVE_REFIT_EVERY_LABELS"),
        ({"RESOLUTION_RETENTION_DAYS": "0"}, "RESOLUTION_RETENTION_DAYS"),  # would purge every label as it arrives
        ({"EMBEDDING_BACKEND": "openai", "EMBEDDING_MODEL": "/models/" + "m" * 100}, "EMBEDDING_MODEL"),  # not storable
    ],
)
def test_refuses_to_start_with_a_value_out_of_range_or_that_it_cannot_read(env, named):
    result = _run(SETUP, DEBUG="1", **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr


def test_reads_yes_no_values_in_any_case_empty_switches_as_off_and_empty_numbers_as_the_default():
    show = [
        "-c",
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SERVER_TIMING, s.CSP_ENFORCE, s.MCP_HTTP_ENABLED, s.RESOLVE_MAX_WRONG_RATE, s.RESOLVE_REFIT_EVERY_LABELS, "
        "s.RESOLUTION_OVERRIDES)",
    ]
    env = dict(SERVER_TIMING="Off", CSP_ENFORCE=" YES ", MCP_HTTP_ENABLED="", RESOLVE_MAX_WRONG_RATE="0.02")
    result = _run(show, DEBUG="1", RESOLVE_REFIT_EVERY_LABELS="", RESOLVE_MARGIN=" ", **env)
    assert result.stdout.split() == ["False", "True", "False", "0.02", "200", "{}"], result.stderr


def test_starts_for_local_use_with_debug_and_in_production_with_both_set():
    assert "started" in _run(SETUP, DEBUG="1").stdout
    assert "started" in _run(SETUP, SECRET_KEY=PROD["SECRET_KEY"], ALLOWED_HOSTS="a.example").stdout


def test_check_deploy_is_clean_with_the_documented_variables():
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PROD)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_them():
    result = _run(["manage.py", "check", "--deploy"], SECRET_KEY=PROD["SECRET_KEY"], ALLOWED_HOSTS="a.example")
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stdout + result.stderr


def test_content_security_policy_headers(client):
    response = client.get("/admin/login/")
    assert "object-src 'none'" in response["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    report_only = response["Content-Security-Policy-Report-Only"]
    assert "default-src 'self'" in report_only and "script-src 'self'" in report_only


def test_whitenoise_serves_admin_and_api_docs_static_files_with_debug_off(settings, tmp_path, db):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", interactive=False, verbosity=0)
    client = Client()  # a new handler: WhiteNoise indexes STATIC_ROOT when it starts
    css = client.get("/static/admin/css/base.css")
    assert css.status_code == 200, css.status_code
    assert b"".join(css.streaming_content if css.streaming else [css.content])
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    bundle = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert bundle.status_code == 200


# --- a cache outage (CACHE_URL's Redis down) never fails a request: the throttles are a protection ---


@pytest.fixture
def dead_cache(monkeypatch):
    """Both throttles count in a Redis nobody listens on (port 1); the outage warning starts afresh."""
    from django.core.cache.backends.redis import RedisCache

    from agents import authentication

    dead = RedisCache("redis://127.0.0.1:1/1", {})
    monkeypatch.setattr(authentication, "cache", dead)
    monkeypatch.setattr(authentication.ApiKeyRateThrottle, "cache", dead)
    monkeypatch.setitem(authentication._cache_outage, "logged_at", None)
    monkeypatch.setitem(authentication._cache_outage, "uncounted", 0)
    monkeypatch.setitem(authentication._cache_outage, "until", 0.0)
    return dead


def _resolve(client, key):
    return client.post(
        "/api/v1/resolve", {"text": "list all cbus"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def test_with_the_throttle_cache_down_keys_are_served_and_bad_keys_refused_with_one_warning(
    client, catalogue, settings, dead_cache, caplog
):
    from tests.conftest import make_client

    settings.API_KEY_RATE = "2/min"
    good = make_client(["resolve"], name="served")._credentials["HTTP_AUTHORIZATION"].split()[1]
    with caplog.at_level("WARNING", logger="agents.authentication"):
        codes = [_resolve(client, good).status_code for _ in range(4)]  # uncounted: no 429 past the rate either
        failed = [_resolve(client, f"alg_{i:08x}_guess").status_code for i in range(4)]
    assert codes == [200] * 4 and failed == [401] * 4
    warnings = [r for r in caplog.records if "throttle cache unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "ConnectionError" in warnings[0].getMessage()  # rate-limited: not one a request


@pytest.mark.parametrize("error", ["redis.exceptions.TimeoutError", "builtins.RuntimeError"])
def test_any_failure_of_the_throttle_cache_fails_open(client, catalogue, settings, monkeypatch, error):
    import importlib

    from agents import authentication
    from tests.conftest import make_client

    module, name = error.rsplit(".", 1)
    exc = getattr(importlib.import_module(module), name)

    class Broken:
        def __getattr__(self, _method):
            def fail(*args, **kwargs):
                raise exc("cache says no")

            return fail

    monkeypatch.setattr(authentication, "cache", Broken())
    monkeypatch.setattr(authentication.ApiKeyRateThrottle, "cache", Broken())
    monkeypatch.setitem(authentication._cache_outage, "until", 0.0)
    settings.API_KEY_RATE = "1/min"
    good = make_client(["resolve"], name="served")._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert [_resolve(client, good).status_code for _ in range(2)] == [200, 200]
    assert _resolve(client, "alg_00000000_nope").status_code == 401


def test_a_cache_that_failed_is_left_alone_for_a_few_seconds_so_a_hanging_one_costs_once(
    client, catalogue, settings, monkeypatch
):
    from agents import authentication
    from tests.conftest import make_client

    asked = []

    class Hanging:
        def __getattr__(self, _method):
            def fail(*args, **kwargs):
                asked.append(_method)
                raise TimeoutError("Timeout reading from socket")

            return fail

    clock = [5000.0]
    monkeypatch.setattr(authentication.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(authentication, "cache", Hanging())
    monkeypatch.setattr(authentication.ApiKeyRateThrottle, "cache", Hanging())
    for key, value in (("logged_at", None), ("uncounted", 0), ("until", 0.0)):
        monkeypatch.setitem(authentication._cache_outage, key, value)
    settings.API_KEY_RATE = "100/min"
    good = make_client(["resolve"], name="served")._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert [_resolve(client, good).status_code for _ in range(3)] == [200] * 3
    assert _resolve(client, "alg_00000000_nope").status_code == 401
    assert len(asked) == 1  # asked once; then skipped while the memo lasts
    clock[0] += authentication.CACHE_OUTAGE_SKIP_S
    assert _resolve(client, good).status_code == 200 and len(asked) == 2  # asked again afterwards


def test_the_outage_warning_is_written_again_after_a_minute_with_the_count(monkeypatch, caplog):
    from agents import authentication

    clock = [1000.0]
    monkeypatch.setattr(authentication.time, "monotonic", lambda: clock[0])
    monkeypatch.setitem(authentication._cache_outage, "logged_at", None)
    monkeypatch.setitem(authentication._cache_outage, "uncounted", 0)
    monkeypatch.setitem(authentication._cache_outage, "until", 0.0)
    with caplog.at_level("WARNING", logger="agents.authentication"):
        for _ in range(5):
            authentication.cache_outage_note("a request", ConnectionError("down"))
        clock[0] += authentication.CACHE_OUTAGE_LOG_EVERY_S
        authentication.cache_outage_note("a request", ConnectionError("down"))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "(1 request(s)" in messages[0] and "(5 request(s)" in messages[1]


# --- sending tasks: a configuration that makes a send impossible, a broker down, no broker at all ---

SENT: list = []


@pytest.fixture
def sends():
    from common.tasks import broker_down_forget

    SENT.clear()
    broker_down_forget()
    yield SENT
    broker_down_forget()
    from config.celery import app

    app.set_current()  # running another app's task inline made it the current app


def _app(name, broker, **conf):
    from celery import Celery

    other = Celery(name, broker=broker, set_as_current=False)
    other.conf.broker_connection_retry_on_startup = False
    other.conf.update(conf)

    @other.task(name=f"tests.{name}_record", ignore_result=True)
    def record(value):
        SENT.append(value)

    return record


def test_a_send_the_broker_configuration_makes_impossible_runs_inline_with_an_error(sends, settings, caplog):
    from common.tasks import task_queue, task_send

    settings.CELERY_FALLBACK_INLINE = True
    record = _app("bogus_transport", "bogus://x")
    with caplog.at_level("WARNING", logger="common.tasks"):
        assert task_send(record, 1) is False
    assert sends == [1]  # not lost
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert errors and "broker configuration is wrong" in errors[0].getMessage() and "KeyError" in errors[0].getMessage()
    assert task_queue(record, 2) is False and sends == [1]  # queue only: nothing sent, nothing run, the caller told

    port = _app("bad_port", "redis://127.0.0.1:notaport/0")
    assert task_send(port, 3) is False and sends == [1, 3]


def test_a_send_to_a_broker_that_is_down_gives_up_within_a_second(sends, settings):
    from common.tasks import task_send

    settings.CELERY_FALLBACK_INLINE = True
    record = _app("refused", "redis://127.0.0.1:1/0", broker_transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    started = time.monotonic()
    assert task_send(record, 1) is False and sends == [1]
    assert time.monotonic() - started < 1.0


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers (a hung broker, a half-open connection)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_broker_that_accepts_and_never_answers_holds_a_send_only_for_the_timeout(sends, settings, silent_server, scheme):
    from common.tasks import task_send

    settings.CELERY_FALLBACK_INLINE = True
    url = f"redis://127.0.0.1:{silent_server}/0" if scheme == "redis" else f"amqp://guest:guest@127.0.0.1:{silent_server}//"
    record = _app(
        f"silent_{scheme}",
        url,
        broker_transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        broker_connection_timeout=settings.CELERY_BROKER_CONNECTION_TIMEOUT,
    )
    started = time.monotonic()
    assert task_send(record, 1) is False and sends == [1]  # before: a Redis publish waited forever
    assert time.monotonic() - started < 2 * settings.CELERY_BROKER_TIMEOUT_S + 1


def test_a_result_store_that_accepts_and_never_answers_holds_a_send_only_for_its_retries(sends, settings, silent_server):
    from celery import Celery

    from common.tasks import task_send
    from config.celery import _result_store_timeouts

    settings.CELERY_FALLBACK_INLINE = True
    other = Celery("silent_store", broker="memory://", backend=f"redis://127.0.0.1:{silent_server}/0", set_as_current=False)
    other.conf.update(_result_store_timeouts())
    assert other.conf.redis_socket_timeout == settings.CELERY_BROKER_TIMEOUT_S  # Celery's own default is 120 s

    @other.task(name="tests.silent_store_record")
    def record(value):
        SENT.append(value)

    retries = other.conf.result_backend_transport_options["retry_policy"]["max_retries"]
    started = time.monotonic()
    assert task_send(record, 1) is False and sends == [1]
    assert time.monotonic() - started < (retries + 1) * (settings.CELERY_BROKER_TIMEOUT_S + 0.5) + 1


def test_after_a_send_that_waited_on_a_down_broker_the_process_does_not_ask_it_for_a_while(sends, settings, monkeypatch):
    from types import SimpleNamespace

    from celery import current_app
    from kombu.exceptions import OperationalError

    import common.tasks
    from common.tasks import task_send

    monkeypatch.setitem(current_app.conf, "task_always_eager", False)
    settings.CELERY_FALLBACK_INLINE = True
    settings.CELERY_BROKER_DOWN_SKIP_S = 0.5
    record = _app("memo", "redis://127.0.0.1:1/0")
    asked: list = []
    # the sends' clock moves only by the broker's waits (and when the test moves it): on a loaded machine the
    # inline runs themselves could outlast the memo, and the broker would be asked again before the test means it
    clock = [time.monotonic()]
    monkeypatch.setattr(common.tasks, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def slow_refusal(self, args=None, kwargs=None, **options):
        asked.append(args[0])
        clock[0] += 0.25  # a connect timeout
        raise OperationalError("timed out")

    monkeypatch.setattr(type(record._get_current_object()), "apply_async", slow_refusal)
    started = clock[0]
    assert [task_send(record, i) for i in range(5)] == [False] * 5
    assert asked == [0] and sends == [0, 1, 2, 3, 4]  # asked once, every one ran inline
    assert clock[0] - started < 0.5  # only the first waited
    clock[0] += 0.6
    assert task_send(record, 5) is False and asked == [0, 5]  # the memo ran out: the broker is asked again


def test_an_instant_refusal_is_not_remembered(sends, settings, monkeypatch):
    from kombu.exceptions import OperationalError

    from common.tasks import task_send

    settings.CELERY_FALLBACK_INLINE = True
    record = _app("instant", "redis://127.0.0.1:1/0")
    asked: list = []
    state = {"up": False}

    def apply_async(self, args=None, kwargs=None, **options):
        asked.append(args[0])
        if not state["up"]:
            raise OperationalError("Connection refused")

    monkeypatch.setattr(type(record._get_current_object()), "apply_async", apply_async)
    assert task_send(record, 1) is False
    state["up"] = True
    assert task_send(record, 2) is True and asked == [1, 2] and sends == [1]  # the broker back: sent at once


def test_without_a_broker_tasks_run_here_without_kombu_warning_about_a_hostname(sends, caplog):
    from celery import shared_task

    from common.tasks import task_queue, task_send

    @shared_task(name="tests.no_broker_record")
    def no_broker_record(value, pair):
        SENT.append((value, pair))

    with caplog.at_level("DEBUG"):
        assert task_send(no_broker_record, 1, (2, 3)) is True
        assert task_queue(no_broker_record, 4, pair=(5, 6)) is True
    assert sends == [(1, [2, 3]), (4, [5, 6])]  # arguments as a worker receives them (through JSON)
    assert not [r for r in caplog.records if "No hostname was supplied" in r.getMessage()]
    with pytest.raises(TypeError):
        task_send(no_broker_record, 1)  # a missing argument is refused as apply_async refuses it


def test_long_tasks_go_to_their_own_queue_when_one_is_named_and_every_name_is_a_registered_task():
    import json

    import embeddings.tasks
    import learning.tasks
    from config.celery import app

    assert embeddings.tasks and learning.tasks  # registered with the app

    show = [
        "-c",
        "import django, json; django.setup(); from django.conf import settings; print(json.dumps(settings.CELERY_TASK_ROUTES))",
    ]
    routed = json.loads(_run(show, DEBUG="1", CELERY_LONG_TASKS_QUEUE="long").stdout.strip().splitlines()[-1])
    assert routed["learning.decision_prior_fit"] == {"queue": "long"} and routed["learning.phrase_import_job_run"] == {
        "queue": "long"
    }
    assert "learning.disambiguation_signals_process" not in routed  # a click's learning stays on the default queue
    assert set(routed) <= set(app.tasks), set(routed) - set(app.tasks)
    assert json.loads(_run(show, DEBUG="1").stdout.strip().splitlines()[-1]) == {}
