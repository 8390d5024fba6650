"""The admin's date drill-down and value filters on large tables read a bounded number of rows: the date hierarchy
probes its buckets instead of a DISTINCT over every row, text filters offer values from the newest rows, and a
fixed set of values is a choice (no query at all)."""

import datetime
import re
import uuid

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from common.admin import TopValuesFilter
from common.templatetags.bounded_dates import bounded_date_hierarchy
from learning.models import DisambiguationRequest, LearnedPhrase, ResolutionRecord, Verb
from learning.resolution import Outcome
from tests.conftest import reviewer_user
from tests.test_review_inbox import signed_in

pytestmark = pytest.mark.django_db

REQUESTS = "/admin/learning/disambiguationrequest/"
STAMPS = [
    datetime.datetime(2024, 12, 31, 23, 30),
    datetime.datetime(2025, 3, 1, 0, 15),
    datetime.datetime(2025, 3, 1, 18, 0),
    datetime.datetime(2025, 3, 17, 9, 0),
    datetime.datetime(2025, 11, 2, 12, 0),
    datetime.datetime(2026, 1, 5, 8, 0),
]


def _requests_at(stamps, text="move money"):
    for at in stamps:
        row = DisambiguationRequest.objects.create(request_id=uuid.uuid4(), text=text, normalized=text, options=[])
        DisambiguationRequest.objects.filter(pk=row.pk).update(created_at=timezone.make_aware(at))


def _changelist(params):
    from django.contrib.auth.models import User

    request = RequestFactory().get(REQUESTS, params)
    request.user = User.objects.filter(username="root").first() or reviewer_user("root", superuser=True)
    model_admin = admin.site._registry[DisambiguationRequest]
    return model_admin.get_changelist_instance(request)


def _choices(result):
    return [(c.get("title"), c.get("link")) for c in result["choices"]], (result.get("back") or {}).get("link")


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"created_at__year": "2025"},
        {"created_at__year": "2025", "created_at__month": "3"},
        {"created_at__year": "2025", "created_at__month": "3", "created_at__day": "1"},
        {"created_at__year": "2024"},
        {"created_at__year": "2025", "created_at__month": "7"},
        {"q": "nothing matches this"},
    ],
)
def test_the_probed_date_hierarchy_lists_what_djangos_lists(params, settings):
    """The same years, months and days (in the current time zone: 23:30 UTC on 31 December is 2025 in Paris), the
    same links, on every level and on an empty list."""
    _requests_at(STAMPS)
    for zone in ("UTC", "Europe/Paris"):
        settings.TIME_ZONE = zone
        with timezone.override(zone):
            assert _choices(bounded_date_hierarchy(_changelist(params))) == _choices(date_hierarchy(_changelist(params)))


def test_the_probed_date_hierarchy_when_every_row_falls_in_one_month():
    """Django opens the hierarchy on the one year and month the rows span; so does the probed one."""
    _requests_at([datetime.datetime(2025, 3, d, 10, 0) for d in (2, 2, 9, 30)])
    ours = bounded_date_hierarchy(_changelist({}))
    assert _choices(ours) == _choices(date_hierarchy(_changelist({})))
    assert [title for title, _ in _choices(ours)[0]] == ["March 2", "March 9", "March 30"]


def test_the_date_hierarchy_reads_no_distinct_dates_of_the_table():
    """The page's date bar comes from the first and last dates and one probe statement, not from a DISTINCT over
    every row: no statement of the page truncates the dates of the list."""
    _requests_at(STAMPS)
    client = signed_in(reviewer_user("root", superuser=True))
    for params in ({}, {"created_at__year": "2025"}, {"created_at__year": "2025", "created_at__month": "3"}):
        with CaptureQueriesContext(connection) as seen:
            page = client.get(REQUESTS, params).content.decode()
        sql = " ".join(q["sql"] for q in seen.captured_queries).upper()
        assert "DATE_TRUNC" not in sql and "DISTINCT" not in sql, params
        assert "toplinks" in page
    page = client.get(REQUESTS, {"created_at__year": "2025"}).content.decode()
    assert set(re.findall(r"created_at__month=(\d+)", page)) == {"3", "11"}


def test_text_filters_offer_the_most_frequent_values_of_the_newest_rows_and_keep_any_value(monkeypatch):
    """A learned phrase's source: the values of the newest rows, most frequent first; an older value is not read on
    each page view, yet it still filters through the URL and is listed once chosen."""
    verb = Verb.objects.create(name="card.freeze", domain="cards")
    for i, source in enumerate(["import:old"] * 3 + ["click"] * 2 + ["confirmation"] * 3):
        LearnedPhrase.objects.create(verb=verb, phrase=f"phrase number {i}", normalized=f"phrase number {i}", source=source)
    client = signed_in(reviewer_user("root", superuser=True))
    url = "/admin/learning/learnedphrase/"

    def offered(params=None):
        page = client.get(url, params or {}).content.decode()
        sidebar = re.search(r'data-filter-title="source".*?</details>', page, re.S).group(0)
        return re.findall(r"\?source=([\w:%]+)\"", sidebar), page

    monkeypatch.setattr(TopValuesFilter, "sample", 5)
    values, _ = offered()
    assert values == ["confirmation", "click"]  # the newest five rows: three confirmations, two clicks
    values, page = offered({"source": "import:old"})
    assert values == ["confirmation", "click", "import%3Aold"]  # the value chosen is listed, last
    assert set(re.findall(r"phrase number (\d)", page)) == {"0", "1", "2"}
    monkeypatch.setattr(TopValuesFilter, "sample", 20_000)
    assert offered()[0] == ["confirmation", "import%3Aold", "click"]  # three each: the value, then the name


def test_no_filter_of_a_large_table_reads_every_distinct_value_of_a_text_column():
    """Every filter on a free-text column of the tables that grow with traffic is the bounded one; a fixed set of
    values is a choice list (Django lists choices without a query)."""
    large = {
        "learning.learningcandidate",
        "learning.learnedphrase",
        "learning.resolutionrecord",
        "learning.disambiguationrequest",
        "feedback.feedbackrecord",
        "feedback.feedbackrecordarchive",
        "memories.memory",
        "memories.memoryquarantine",
        "memories.memoryretrieval",
        "autonomy.episode",
        "review.decision",
    }
    unbounded = []
    for model, model_admin in admin.site._registry.items():
        if model._meta.label_lower not in large:
            continue
        for item in model_admin.list_filter:
            name, spec = (item, None) if isinstance(item, str) else (item if isinstance(item, tuple) else (None, item))
            if name is None or "__" in name:
                continue
            field = model._meta.get_field(name)
            if field.get_internal_type() in ("CharField", "TextField") and not field.choices:
                if spec is None or not issubclass(spec, (TopValuesFilter, admin.EmptyFieldListFilter)):
                    unbounded.append(f"{model._meta.label_lower}.{name}")
    assert unbounded == []


def test_a_resolution_records_outcome_is_a_choice_of_the_resolvers_outcomes():
    assert set(ResolutionRecord.Outcome.values) == {Outcome.RESOLVED, Outcome.AMBIGUOUS, Outcome.NO_MATCH}
    client = signed_in(reviewer_user("root", superuser=True))
    with CaptureQueriesContext(connection) as seen:
        assert client.get("/admin/learning/resolutionrecord/").status_code == 200
    assert not any("DISTINCT" in q["sql"].upper() for q in seen.captured_queries)


def test_counting_active_learned_phrases_reads_their_index_not_the_rows(catalogue):
    """The admin index and ``/learning/stats`` count a scope's active learned phrases (an agent's key: without
    another agent's private ones) through ``learnedphrase_active``: the table's rows carry their vectors, a count
    over them read 80 ms at 100,000 phrases."""
    from learning.selectors.candidates import dashboard_counts, learning_stats
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_ids_all

    verb = catalogue["cbu.list"]
    LearnedPhrase.objects.bulk_create(
        LearnedPhrase(verb=verb, phrase=f"p{i}", normalized=f"p{i}", user_id=f"u{i % 7}", is_active=i % 5 != 0)
        for i in range(500)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learning_learnedphrase")
        cursor.execute("SET LOCAL enable_seqscan = off")
    counts = []
    with tenant_scope(tenant_ids_all()[:1]):
        for read in (dashboard_counts, learning_stats, lambda: acting_agent_run(learning_stats)):
            with CaptureQueriesContext(connection) as seen:
                counts.append(read()["active_learned_phrases"])
            (sql,) = [q["sql"] for q in seen.captured_queries if "learning_learnedphrase" in q["sql"] and "COUNT" in q["sql"]]
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "on learnedphrase_active" in plan and "Seq Scan" not in plan, plan
    assert counts == [400, 400, 400]


def acting_agent_run(read):
    from agents.models import Agent
    from tenants.context import acting_agent

    with acting_agent(Agent.objects.create(name="counting-agent")):
        return read()


@pytest.mark.parametrize(
    "stamps",
    [
        [datetime.datetime(2025, 3, 1, 10, 0), datetime.datetime(9999, 12, 31, 12, 0)],  # the calendar's last day
        [datetime.datetime(1500, 6, 1, 10, 0), datetime.datetime(2025, 3, 1, 10, 0)],  # more years than are probed
    ],
)
def test_the_probed_date_hierarchy_at_the_calendars_ends_lists_what_djangos_lists(stamps):
    _requests_at(stamps)
    for params in ({}, {"created_at__year": "2025"}):  # (Django's own list fails on a chosen year 9999)
        assert _choices(bounded_date_hierarchy(_changelist(params))) == _choices(date_hierarchy(_changelist(params)))
