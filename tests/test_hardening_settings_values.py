"""Values the settings refuse at the start, naming the variable, instead of failing later (a 500 on every request,
a broker flooded by the beat, work lost in a send), and the empty values that mean the default.

Each case runs config/settings.py afresh with the variables given (``runpy``: the loaded settings are untouched);
one case runs ``manage.py check`` to see the refusal as an operator does."""

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.test_hardening_settings import _run

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "config" / "settings.py"
# Variables of the environment the tests run in that would change what these cases read.
CLEARED = (
    "API_KEY_RATE",
    "AUTH_FAILURE_RATE",
    "CACHE_URL",
    "CELERY_BROKER_URL",
    "CELERY_RESULT_BACKEND",
    "DATABASE_URL",
    "DB_POOL_MAX_SIZE",
    "DB_POOL_MIN_SIZE",
    "LOG_LEVEL",
    "SECURE_PROXY_SSL_HEADER",
    "TRUSTED_PROXIES",
    "VAR_DIR",
    "STATIC_ROOT",
)


@pytest.fixture
def load(monkeypatch):
    """``load(VAR=value, ...)``: the settings module's names, read with those variables."""

    def load(**env):
        for name in CLEARED:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("DEBUG", "1")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return runpy.run_path(str(SETTINGS))

    return load


def refused(load, named: str, **env) -> str:
    with pytest.raises(ImproperlyConfigured) as exc:
        load(**env)
    assert named in str(exc.value), str(exc.value)
    return str(exc.value)


# --- request rates ---


@pytest.mark.parametrize("value", ["abc", "30/w", "30/week", "0/min", "30/", "/min", "30 per minute", "-3/min", "3.5/min"])
@pytest.mark.parametrize("name", ["API_KEY_RATE", "AUTH_FAILURE_RATE"])
def test_a_rate_drf_cannot_read_stops_the_start(load, name, value):
    refused(load, name, **{name: value})


@pytest.mark.parametrize(
    ("value", "read"),
    [("30/MIN", "30/min"), (" 5 / second ", "5/second"), ("100/hour", "100/hour"), ("1/d", "1/d"), ("7/s", "7/s")],
)
def test_rates_in_each_unit_drf_accepts(load, value, read):
    names = load(API_KEY_RATE=value, AUTH_FAILURE_RATE=value)
    assert names["API_KEY_RATE"] == read
    assert names["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]["auth_failures"] == read


def test_an_empty_request_rate_is_no_limit_and_an_empty_failure_rate_the_default(load):
    names = load(API_KEY_RATE="", AUTH_FAILURE_RATE=" ")
    assert names["API_KEY_RATE"] == ""
    assert names["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]["auth_failures"] == "30/min"


# --- beat intervals ---

BEAT = {
    "EMBEDDING_SWEEP_SECONDS": "embeddings-backfill",
    "FEEDBACK_EXPIRE_EVERY_S": "feedback-disambiguations-expire",
    "RESOLVE_REFIT_EVERY_S": "learning-decision-refit",
    "RESOLVE_PRIOR_CHECK_S": "learning-decision-prior-refresh",
    "AUTONOMY_CYCLE_INTERVAL_S": "autonomy-cycle-all-agents",
    "FEEDBACK_ARCHIVE_INTERVAL_S": "feedback-archive-records",
    "PURGE_EXPIRED_BLOCKS_SECONDS": "learning-purge-expired-blocks",
    "REVIEW_BACKLOG_EVERY_S": "review-backlog-snapshot",
    "MEMORY_PURGE_INTERVAL_S": "memory-purge-deprecated",
    "LEARNED_TENANT_INDEX_EVERY_S": "learning-tenant-indexes-sync",
    "API_IDEMPOTENCY_PURGE_EVERY_S": "agents-idempotent-requests-purge",
    "RESOLUTION_PURGE_EVERY_S": "learning-resolution-records-purge",
    "FEEDBACK_SIGNAL_SWEEP_EVERY_S": "learning-disambiguation-signals-sweep",
    "AUTONOMY_HISTORY_PURGE_EVERY_S": "autonomy-history-purge",
    "HISTORY_PURGE_EVERY_S": "common-history-purge",
    "LEARNING_IMPORT_SWEEP_EVERY_S": "learning-import-jobs-sweep",
}


@pytest.mark.parametrize("value", ["0", "-5"])
@pytest.mark.parametrize("name", sorted(BEAT))
def test_a_beat_interval_below_a_second_stops_the_start(load, name, value):
    assert "at least 1" in refused(load, name, **{name: value})


def test_every_beat_job_has_its_interval_variable_and_a_second_is_accepted(load):
    schedule = load(**dict.fromkeys(BEAT, "1"))["CELERY_BEAT_SCHEDULE"]
    assert set(schedule) == set(BEAT.values())
    assert {job: entry["schedule"] for job, entry in schedule.items()} == dict.fromkeys(BEAT.values(), 1.0)


# --- numbers out of range ---


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"EMBEDDING_BATCH_SIZE": "0"}, "EMBEDDING_BATCH_SIZE"),  # range() step 0: every row left unembedded
        ({"EMBEDDING_CACHE_SIZE": "-1"}, "EMBEDDING_CACHE_SIZE"),  # popitem on an empty cache
        ({"DB_CONN_MAX_AGE": "-5"}, "DB_CONN_MAX_AGE"),
        ({"SECURE_HSTS_SECONDS": "-1"}, "SECURE_HSTS_SECONDS"),
        ({"API_MAX_BODY_BYTES": "0"}, "API_MAX_BODY_BYTES"),  # 413 for every request
        ({"API_MAX_BODY_BYTES": "100"}, "API_MAX_BODY_BYTES"),
        ({"DB_POOL_MAX_SIZE": "5", "DB_POOL_MIN_SIZE": "-1"}, "DB_POOL_MIN_SIZE"),  # 500 on every request
        ({"DB_POOL_MAX_SIZE": "5", "DB_POOL_MIN_SIZE": "6"}, "DB_POOL_MIN_SIZE"),
        ({"DB_POOL_MAX_SIZE": "-2"}, "DB_POOL_MAX_SIZE"),
        ({"REVIEW_PAGE_SIZE": "0"}, "REVIEW_PAGE_SIZE"),
        ({"MEMORY_RETRIEVE_TOP_K": "0"}, "MEMORY_RETRIEVE_TOP_K"),
        ({"LEARNING_IMPORT_BATCH_SIZE": "0"}, "LEARNING_IMPORT_BATCH_SIZE"),
        ({"CALIBRATION_EMA_ALPHA": "1.5"}, "CALIBRATION_EMA_ALPHA"),
        ({"RESOLVE_MAX_WRONG_RATE": "-0.1"}, "RESOLVE_MAX_WRONG_RATE"),
        ({"MCP_THREADS": "0"}, "MCP_THREADS"),
        ({"CELERY_BROKER_DOWN_SKIP_S": "-1"}, "CELERY_BROKER_DOWN_SKIP_S"),
        ({"CELERY_BROKER_TIMEOUT_S": "0"}, "CELERY_BROKER_TIMEOUT_S"),  # every send to a live broker would time out
        ({"HISTORY_RETENTION_DAYS": "0"}, "HISTORY_RETENTION_DAYS"),  # every object's trail but its latest row, daily
        ({"FEEDBACK_RECORD_RETENTION_DAYS": "30"}, "FEEDBACK_RECORD_RETENTION_DAYS"),  # within MISTAKE_WINDOW_DAYS (30)
        (
            {"MISTAKE_WINDOW_DAYS": "200", "FEEDBACK_RECORD_RETENTION_DAYS": "180"},
            "FEEDBACK_RECORD_RETENTION_DAYS",
        ),  # the daily archive would refuse every run
    ],
)
def test_a_number_out_of_its_range_stops_the_start(load, env, named):
    refused(load, named, **env)


def test_the_edges_of_the_ranges_are_accepted(load):
    names = load(EMBEDDING_CACHE_SIZE="0", EMBEDDING_BATCH_SIZE="1", DB_CONN_MAX_AGE="0", API_MAX_BODY_BYTES="1024")
    assert (names["EMBEDDING_CACHE_SIZE"], names["EMBEDDING_BATCH_SIZE"], names["API_MAX_BODY_BYTES"]) == (0, 1, 1024)
    assert names["DATABASES"]["default"]["CONN_MAX_AGE"] == 0


def test_the_pool_minimum_defaults_within_a_small_pool_and_may_be_zero(load):
    assert load(DB_POOL_MAX_SIZE="1")["DATABASES"]["default"]["OPTIONS"]["pool"]["min_size"] == 1
    assert load(DB_POOL_MAX_SIZE="5")["DATABASES"]["default"]["OPTIONS"]["pool"]["min_size"] == 2
    assert load(DB_POOL_MAX_SIZE="5", DB_POOL_MIN_SIZE="0")["DATABASES"]["default"]["OPTIONS"]["pool"]["min_size"] == 0


# --- URLs ---


@pytest.mark.parametrize("value", ["notaurl", "http://cache.internal:6379/1", "memcached://c:11211", "redis://c:port/1"])
def test_a_cache_url_django_redis_cannot_use_stops_the_start(load, value):
    refused(load, "CACHE_URL", CACHE_URL=value)


@pytest.mark.parametrize(
    "value", ["redis://c:6379/1", "rediss://:pw@c:6380/1", "unix:///run/redis.sock?db=1", "redis://a/1,redis://b/1"]
)
def test_redis_cache_urls_are_accepted(load, value):
    assert load(CACHE_URL=value)["CACHES"]["default"]["LOCATION"] == value


@pytest.mark.parametrize("value", ["bogus://x", "redis://127.0.0.1:notaport/0", "localhost:6379", "redis://h:99999/0"])
def test_a_broker_url_kombu_cannot_use_stops_the_start(load, value):
    refused(load, "CELERY_BROKER_URL", CELERY_BROKER_URL=value)


def test_url_messages_never_repeat_the_password(load):
    assert "s3cret" not in refused(load, "CELERY_BROKER_URL", CELERY_BROKER_URL="redis://:s3cret@h:port/0")
    assert "s3cret" not in refused(load, "DATABASE_URL", DATABASE_URL="postgresql://u:s3cret@localhost:notaport/db")
    assert "s3cret" not in refused(load, "CACHE_URL", CACHE_URL="redis://:s3cret@h:nope/1")


def test_the_result_store_defaults_to_the_broker_only_when_that_is_redis(load):
    assert load(CELERY_BROKER_URL="redis://h:6379/0")["CELERY_RESULT_BACKEND"] == "redis://h:6379/0"
    assert load(CELERY_BROKER_URL="rediss://h:6380/0")["CELERY_RESULT_BACKEND"] == "rediss://h:6380/0"
    assert load(CELERY_BROKER_URL="amqp://guest:guest@h:5672//")["CELERY_RESULT_BACKEND"] is None  # Celery has no amqp store
    assert load(CELERY_BROKER_URL="amqp://h//", CELERY_RESULT_BACKEND="redis://r/1")["CELERY_RESULT_BACKEND"] == "redis://r/1"
    assert load(CELERY_BROKER_URL="redis://h/0", CELERY_RESULT_BACKEND="")["CELERY_RESULT_BACKEND"] == "redis://h/0"
    assert load()["CELERY_RESULT_BACKEND"] is None and load()["CELERY_TASK_ALWAYS_EAGER"] is True
    refused(load, "CELERY_RESULT_BACKEND", CELERY_BROKER_URL="redis://h/0", CELERY_RESULT_BACKEND="amqq://h//")


def test_a_database_url_with_a_bad_port_names_the_variable(load):
    refused(load, "DATABASE_URL", DATABASE_URL="postgresql://u:p@localhost:notaport/db")
    assert load(DATABASE_URL="postgresql://u:p@db:5433/alg")["DATABASES"]["default"]["PORT"] == "5433"


# --- names, lists and paths ---


def test_log_level_in_any_case_and_empty_as_the_default(load):
    logging = load(LOG_LEVEL="debug")["LOGGING"]
    assert logging["root"]["level"] == "DEBUG" and logging["loggers"]["agents"]["level"] == "DEBUG"
    logging = load(LOG_LEVEL="")["LOGGING"]
    assert logging["root"]["level"] == "WARNING" and logging["loggers"]["learning"]["level"] == "INFO"
    refused(load, "LOG_LEVEL", LOG_LEVEL="loud")


def test_calibration_buckets_name_the_variable_and_empty_is_the_default(load):
    refused(load, "CALIBRATION_BUCKETS", CALIBRATION_BUCKETS="a,b")
    refused(load, "CALIBRATION_BUCKETS", CALIBRATION_BUCKETS="0.9,0.1")
    assert load(CALIBRATION_BUCKETS="")["CALIBRATION_BUCKETS"] == [0.0, 0.5, 0.7, 0.9, 1.0]


@pytest.mark.parametrize(
    ("name", "typo"), [("RESOLVE_DECISION", "learnd"), ("MEMORY_EXTRACTOR", "llmm"), ("EMBEDDING_BACKEND", "foo")]
)
def test_a_choice_that_is_none_of_its_values_stops_the_start(load, name, typo):
    refused(load, name, **{name: typo})


def test_choices_in_any_case_and_empty_as_the_default(load):
    names = load(RESOLVE_DECISION="Fixed", MEMORY_EXTRACTOR="LLM", MEMORY_LLM_MODEL="gpt-x", EMBEDDING_BACKEND="")
    assert (names["RESOLVE_DECISION"], names["MEMORY_EXTRACTOR"], names["EMBEDDING_BACKEND"]) == ("fixed", "llm", "local")


@pytest.mark.parametrize("value", ["HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_PROTO,https,extra", "HTTP_X_FORWARDED_PROTO,"])
def test_a_proxy_ssl_header_without_exactly_two_parts_stops_the_start(load, value):
    refused(load, "SECURE_PROXY_SSL_HEADER", SECURE_PROXY_SSL_HEADER=value)


def test_a_proxy_ssl_header_of_two_parts_or_none(load):
    assert load(SECURE_PROXY_SSL_HEADER=" HTTP_X_FORWARDED_PROTO , https ")["SECURE_PROXY_SSL_HEADER"] == (
        "HTTP_X_FORWARDED_PROTO",
        "https",
    )
    assert load(SECURE_PROXY_SSL_HEADER="")["SECURE_PROXY_SSL_HEADER"] is None


@pytest.mark.parametrize("value", ["10.0.0.0/33", "192.168.1.300", "10.0.0.1,proxy.internal"])
def test_an_entry_of_trusted_proxies_that_is_no_address_stops_the_start(load, value):
    refused(load, "TRUSTED_PROXIES", TRUSTED_PROXIES=value)


def test_trusted_proxies_keep_every_valid_entry(load):
    assert load(TRUSTED_PROXIES="10.0.0.0/8, 192.168.1.7 ,::1")["TRUSTED_PROXIES"] == ["10.0.0.0/8", "192.168.1.7", "::1"]


def test_an_empty_var_dir_is_the_default_not_the_current_directory(load):
    names = load(VAR_DIR="", STATIC_ROOT="")
    assert names["VAR_DIR"] == ROOT / "var" and names["STATIC_ROOT"] == ROOT / "var" / "static"
    assert names["DATABASES"]["default"]["EMBEDDED_PGDATA"] == str(ROOT / "var" / "pgdata")


def test_manage_py_check_stops_naming_the_variable_without_a_traceback_of_the_cause():
    result = _run(["manage.py", "check"], DEBUG="1", API_KEY_RATE="abc")
    assert result.returncode != 0
    assert result.stderr.startswith("Configuration: API_KEY_RATE='abc'"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


# --- thresholds and ages whose meaning has a range ---


@pytest.mark.parametrize(
    "name,value", [("RESOLVE_MIN_SCORE", "80"), ("RESOLVE_MARGIN", "-2"), ("FEEDBACK_DECIDE_SIMILARITY", "90")]
)
def test_a_resolver_threshold_outside_what_a_cosine_can_be_stops_the_start(load, name, value):
    refused(load, name, **{name: value})


def test_a_resolver_threshold_within_range_is_pinned_and_zero_rule_expiry_means_never(load):
    names = load(RESOLVE_MIN_SCORE="0.4", CORRECTION_RULE_EXPIRY_DAYS="0")
    assert names["RESOLUTION_OVERRIDES"]["min_score"] == 0.4 and names["CORRECTION_RULE_EXPIRY_DAYS"] == 0


def test_a_memory_purge_age_of_zero_days_stops_the_start(load):
    refused(load, "MEMORY_PURGE_DEFAULT_DAYS", MEMORY_PURGE_DEFAULT_DAYS="0")


# --- values that started and failed later, or never ---


@pytest.mark.parametrize(
    "name, value",
    [
        ("MEMORY_RETRIEVE_MIN_SCORE", "25"),  # a cosine, not a percent
        ("LEARNED_INDEX_BUILD_MEMORY", "lots"),
        ("LEARNED_INDEX_BUILD_MEMORY", "1GB; DROP TABLE x"),
        ("MCP_HTTP_PATH", "mcp"),
        ("MCP_HTTP_PATH", "/api/v1/resolve"),
        ("MCP_HTTP_PATH", "/"),
        ("RESOLVE_FLOOR_Q_MIN_SCORE", "75"),
    ],
)
def test_a_value_that_would_fail_later_stops_the_start_naming_its_variable(load, name, value):
    refused(load, name, **{name: value})


def test_llm_extraction_without_a_model_stops_the_start(load):
    refused(load, "MEMORY_LLM_MODEL", MEMORY_EXTRACTOR="llm")


def test_empty_values_that_mean_the_default(load):
    values = load(CELERY_TASK_DEFAULT_QUEUE="", MCP_HTTP_PATH="", LEARNED_INDEX_BUILD_MEMORY="")
    assert (values["CELERY_TASK_DEFAULT_QUEUE"], values["MCP_HTTP_PATH"], values["LEARNED_INDEX_BUILD_MEMORY"]) == (
        "celery",
        "/mcp",
        "1GB",
    )
    assert values["DATABASES"]["default"]["OPTIONS"]["connect_timeout"] == "5"
    assert load(DATABASE_URL="postgresql://u@h/db?connect_timeout=2")["DATABASES"]["default"]["OPTIONS"]["connect_timeout"] == "2"
    assert load(MCP_HTTP_PATH="/agents/mcp")["MCP_HTTP_PATH"] == "/agents/mcp"
    assert load(MCP_HTTP_PATH="/mcp/")["MCP_HTTP_PATH"] == "/mcp"  # as the ASGI app reads it
    assert load(LEARNED_INDEX_BUILD_MEMORY="512MB")["LEARNED_INDEX_BUILD_MEMORY"] == "512MB"


def test_the_apps_own_info_logs_are_kept(load):
    loggers = load()["LOGGING"]["loggers"]
    apps = ("agents", "embeddings", "learning", "memories", "actions", "feedback", "autonomy", "review", "privacy")
    assert all(loggers[a]["level"] == "INFO" for a in (*apps, "common", "tenants", "mcp_server", "config"))


# --- windows and retention: a value past the calendar's reach ---

DAYS = (
    "RESOLUTION_RETENTION_DAYS",
    "MEMORY_PURGE_DEFAULT_DAYS",
    "MISTAKE_WINDOW_DAYS",
    "CORRECTION_RULE_EXPIRY_DAYS",
    "CALIBRATION_WINDOW_DAYS",
    "AUTONOMY_WINDOW_DAYS",
    "AUTONOMY_HISTORY_RETENTION_DAYS",
    "HISTORY_RETENTION_DAYS",
    "FEEDBACK_RECORD_RETENTION_DAYS",
)
SECONDS = (
    "API_IDEMPOTENCY_TTL_S",
    "MEMORY_OUTCOME_WINDOW_S",
    "REVIEW_CLAIM_SECONDS",
    "FEEDBACK_SIGNAL_SWEEP_AFTER_S",
    "AUTONOMY_EVALUATION_INTERVAL_S",
)


@pytest.mark.parametrize("name", DAYS + SECONDS)
def test_a_window_or_retention_beyond_a_century_stops_the_start(load, name):
    """A million days of retention (or a trillion seconds of idempotency) passed the start and then failed every run
    of its purge task, or every keyed write, with an OverflowError: the start refuses it, naming the variable, and the
    longest accepted value still does date arithmetic."""
    from datetime import timedelta

    from django.utils import timezone

    from common.validation import MAX_DAYS

    huge = "1000000" if name in DAYS else "1000000000000"
    refused(load, name, **{name: huge})
    longest = MAX_DAYS if name in DAYS else MAX_DAYS * 86_400
    loaded = load(**{name: str(longest)})
    assert loaded[name] == longest
    span = timedelta(days=longest) if name in DAYS else timedelta(seconds=longest)
    assert timezone.now() - span < timezone.now() < timezone.now() + span


def test_a_periodic_task_not_started_before_its_next_run_is_dropped(load):
    """With the workers down for a day the queue held one of each sweep per tick, all run when they came back: every
    beat entry expires when its next run is due."""
    names = load()
    assert names["CELERY_BEAT_SCHEDULE"]
    for name, entry in names["CELERY_BEAT_SCHEDULE"].items():
        assert entry["options"]["expires"] == float(entry["schedule"]), name


def test_a_task_taken_by_a_worker_is_not_handed_to_another_before_the_longest_task_ends(load):
    """Tasks are acknowledged late: Redis hands one a worker has not finished to another after the visibility
    timeout (an hour by default, shorter than a backfill after a change of model)."""
    names = load()
    assert names["CELERY_TASK_ACKS_LATE"] and names["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] == 43_200
    assert load(CELERY_VISIBILITY_TIMEOUT_S="7200")["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] == 7200
    refused(load, "CELERY_VISIBILITY_TIMEOUT_S", CELERY_VISIBILITY_TIMEOUT_S="10")
