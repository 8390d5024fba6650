"""The statements every resolve runs are prepared once per connection and run from their generic plan
(``plan_cache_mode = force_generic_plan`` on the connection, config/settings.py): PostgreSQL's own choice planned a
tenant-scoped exact lookup anew on every request. Other queries bind on the client and have no plan to reuse."""

import pytest
from django.db import connection

from learning.selectors.tiers import learned_exact
from tenants.context import tenant_scope
from tenants.services import tenant_create
from tests.test_hardening_settings_values import load  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def _exact_plans() -> tuple[int, int]:
    """(generic, custom) plans of this connection's prepared exact statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%learning_cataloguestamp%learning_learnedphrase%"],
        )
        rows = cursor.fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def test_a_tenant_scoped_exact_lookup_runs_from_its_generic_plan_every_time():
    acme = tenant_create(slug="acme")
    tenant_create(slug="globex")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('plan_cache_mode')")
        assert cursor.fetchone()[0] == "force_generic_plan"
    for i in range(8):  # past the five custom plans PostgreSQL's automatic choice starts with
        with tenant_scope([acme.pk]):
            hits = learned_exact(normalized=f"where is my parcel {i}", user_id=f"user{i}", domain=None)
        assert list(hits) == []
    generic, custom = _exact_plans()
    assert (generic, custom) == (8, 0)


def test_only_client_side_binding_with_prepared_statements_forces_generic_plans(load, monkeypatch):  # noqa: F811
    def options(**env):
        for name in ("PG_OPTIONS", "DB_PREPARED_STATEMENTS", "DB_SERVER_SIDE_BINDING"):  # each case from the defaults
            monkeypatch.delenv(name, raising=False)
        return load(**env)["DATABASES"]["default"]["OPTIONS"]["options"]

    assert "-c plan_cache_mode=force_generic_plan" in options()
    assert "plan_cache_mode" not in options(DB_PREPARED_STATEMENTS="0")
    assert "plan_cache_mode" not in options(DB_SERVER_SIDE_BINDING="1")
    mine = options(PG_OPTIONS="-c plan_cache_mode=auto")
    assert mine.count("plan_cache_mode") == 1 and "plan_cache_mode=auto" in mine
    url = options(DATABASE_URL="postgresql://u@db.example/app?options=-c%20plan_cache_mode%3Dforce_custom_plan")
    assert url.count("plan_cache_mode") == 1 and "force_custom_plan" in url
    assert "force_generic_plan" in options(DATABASE_URL="postgresql://u@db.example/app")
