"""An API key's scopes: the admin offers the known ones as checkboxes and stores a sorted list through the service;
``has_scope`` reads a list only; the database holds nothing but an array."""

import importlib
import re

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client

from agents.models import ApiKey
from agents.services import api_key_update
from common.api import ApplicationError
from tests.conftest import make_client, reviewer_user

pytestmark = pytest.mark.django_db

migration = importlib.import_module("agents.migrations.0005_api_key_scopes_array")


def _editor():
    client = Client(raise_request_exception=False)
    client.force_login(reviewer_user("rita", "view_apikey", "change_apikey"))
    return client


def _change(key):
    return f"/admin/agents/apikey/{key.pk}/change/"


def test_the_change_form_offers_the_known_scopes_as_checkboxes():
    key = make_client(["resolve"]).key
    page = _editor().get(_change(key)).content.decode()
    boxes = {
        re.search(r'value="(\w+)"', tag)[1]: "checked" in tag
        for tag in re.findall(r'<input type="checkbox" name="scopes"[^>]*>', page)
    }
    assert boxes == {"resolve": True, "feedback": False, "governance": False}


@pytest.mark.parametrize(
    "scopes", ["7", '"resolvefeedback"', "resolvefeedback", ["resolve", "no-such-scope"], '{"resolve": 1}', []]
)
def test_anything_but_known_scopes_is_refused_and_the_key_keeps_working(scopes):
    api = make_client(["resolve"])
    answer = _editor().post(_change(api.key), {"name": api.key.name, "scopes": scopes})
    assert answer.status_code == 200 and "errorlist" in answer.content.decode()
    assert ApiKey.objects.get(pk=api.key.pk).scopes == ["resolve"]
    assert api.get("/api/v1/proposals").status_code == 403  # still resolve only: no feedback scope, no 500


def test_known_scopes_are_stored_sorted_and_take_effect_at_once():
    api = make_client(["resolve"])
    assert api.get("/api/v1/proposals").status_code == 403  # the key is now in this process's cache
    answer = _editor().post(_change(api.key), {"name": "renamed", "scopes": ["governance", "feedback", "resolve"]})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    key = ApiKey.objects.get(pk=api.key.pk)
    assert key.scopes == ["feedback", "governance", "resolve"] and key.name == "renamed"
    assert key.history.first().scopes == ["feedback", "governance", "resolve"]
    assert api.get("/api/v1/proposals").status_code == 200


def test_a_key_name_without_anything_visible_is_refused():
    key = make_client(["resolve"]).key
    answer = _editor().post(_change(key), {"name": "\u200b", "scopes": ["resolve"]})
    assert answer.status_code == 200 and "errorlist" in answer.content.decode()
    assert ApiKey.objects.get(pk=key.pk).name == key.name


@pytest.mark.parametrize("scopes", [[], ["resolve", "admin"], "resolve", 7, [{"resolve": 1}]])
def test_the_service_refuses_what_is_not_a_list_of_known_scopes(scopes):
    key = make_client(["resolve"]).key
    with pytest.raises(ApplicationError):
        api_key_update(key=key, name="k", scopes=scopes)
    assert ApiKey.objects.get(pk=key.pk).scopes == ["resolve"]


@pytest.mark.parametrize(
    "stored,granted",
    [
        (["resolve", "feedback"], {"resolve", "feedback"}),
        ("resolvefeedback", set()),
        (7, set()),
        (None, set()),
        ({"feedback": 1}, set()),
    ],
)
def test_has_scope_reads_a_list_only(stored, granted):
    key = ApiKey(scopes=stored)
    assert {s for s in ("resolve", "feedback", "governance") if key.has_scope(s)} == granted


@pytest.mark.parametrize("value", ["7", '"resolve"', '{"resolve": 1}', "null"])
def test_the_database_holds_only_an_array(value):
    key = make_client(["resolve"]).key
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE agents_apikey SET scopes = %s::jsonb WHERE id = %s", [value, key.pk])


def test_the_migration_clears_what_is_not_an_array():
    good, bad = make_client(["resolve"]).key, make_client(["resolve"], name="agent-b").key
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # as in a migration, no check of an earlier write is pending
        cursor.execute("ALTER TABLE agents_apikey DROP CONSTRAINT api_key_scopes_array")
        cursor.execute("UPDATE agents_apikey SET scopes = '\"resolvefeedback\"'::jsonb WHERE id = %s", [bad.pk])
        cursor.execute(migration.NOT_AN_ARRAY_CLEARED)
    with connection.schema_editor() as editor:
        editor.add_constraint(ApiKey, migration.Migration.operations[1].constraint)
    assert ApiKey.objects.get(pk=bad.pk).scopes == [] and ApiKey.objects.get(pk=good.pk).scopes == ["resolve"]
