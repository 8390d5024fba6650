"""Safe production settings: refuse to start without SECRET_KEY/ALLOWED_HOSTS when DEBUG is off, every
`check --deploy` warning cleared by a documented variable, CSP headers, and static files served by WhiteNoise."""

import os
import subprocess
import sys
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
