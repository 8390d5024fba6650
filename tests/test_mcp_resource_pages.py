"""MCP's list resources come in pages: a catalogue of any size is read in bounded pieces, each naming the next."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from actions.models import Action
from learning.catalogue import VerbEntry
from learning.models import Verb
from learning.selectors import verb_catalogue
from learning.services.catalogue import verb_catalogue_load
from mcp_server.server import RESOURCE_PAGE_SIZE, Outcome, read_resource_sync
from tests.conftest import make_client
from tests.test_mcp_policies import as_the_server_runs

pytestmark = pytest.mark.django_db


def read(uri: str, raw: str) -> Outcome:
    """One resources/read as the server runs it, in the test's transaction."""
    return as_the_server_runs(read_resource_sync, uri, f"Bearer {raw}", "test")


def read_all(uri: str, raw: str, key: str) -> tuple[list, list[str]]:
    items, uris = [], []
    while uri is not None:
        uris.append(uri)
        data = read(uri, raw).data
        items += data[key]
        uri = data["next"]
    return items, uris


@pytest.fixture
def seven_verbs(db):
    verb_catalogue_load(
        entries=[
            VerbEntry(f"unit.v{i}", "unit", f"Verb {i}", "", [f"do thing {i} {w}" for w in ("now", "later", "soon", "today")])
            for i in range(7)
        ]
    )


def test_the_verb_catalogue_is_read_page_by_page_to_the_last(seven_verbs):
    raw = make_client(["resolve"]).raw
    verbs, uris = read_all("alg://verbs?limit=3", raw, "verbs")
    assert [v["name"] for v in verbs] == [f"unit.v{i}" for i in range(7)]
    assert uris == ["alg://verbs?limit=3", "alg://verbs?offset=3&limit=3", "alg://verbs?offset=6&limit=3"]
    first = read("alg://verbs", raw).data
    assert first["total"] == 7 and first["next"] is None and len(first["verbs"]) == 7
    assert all(len(v["examples"]) == 3 for v in verbs)  # three examples of four, the first taught
    assert verbs[0]["examples"] == ["do thing 0 now", "do thing 0 later", "do thing 0 soon"]


def test_the_action_catalogue_is_read_page_by_page(seven_verbs):
    raw = make_client(["resolve"]).raw
    for i in range(5):
        Action.objects.get_or_create(name=f"unit.act{i}")
    actions, uris = read_all("alg://actions?limit=2", raw, "actions")
    assert [a["name"] for a in actions] == sorted(Action.objects.values_list("name", flat=True))
    assert len(uris) == -(-Action.objects.count() // 2)
    assert read("alg://actions?offset=9999", raw).data == {"actions": [], "total": Action.objects.count(), "next": None}


def test_a_page_never_holds_more_than_the_page_size(seven_verbs):
    raw = make_client(["resolve"]).raw
    bad = read(f"alg://verbs?limit={RESOURCE_PAGE_SIZE + 1}", raw).error
    assert bad["http_status"] == 400 and "limit" in bad["fields"]


@pytest.mark.parametrize(
    ("query", "field"),
    [("offset=-1", "offset"), ("offset=x", "offset"), ("offset=", "offset"), ("page=2", "page"), ("limit=0", "limit")],
)
def test_a_bad_page_is_refused_naming_the_parameter(seven_verbs, query, field):
    raw = make_client(["resolve"]).raw
    for base in ("alg://verbs", "alg://actions"):
        error = read(f"{base}?{query}", raw).error
        assert error["http_status"] == 400 and field in error["fields"], (base, error)


def test_examples_are_read_in_one_query_however_many_phrases_a_verb_has(seven_verbs):
    read_catalogue = lambda: verb_catalogue(limit=5)  # noqa: E731
    with CaptureQueriesContext(connection) as few:
        before = read_catalogue()
    verb_catalogue_load(entries=[VerbEntry("unit.v0", "unit", "Verb 0", "", [f"do thing 0 in room {n}" for n in range(40)])])
    with CaptureQueriesContext(connection) as many:
        after = read_catalogue()
    assert len(many) == len(few) == 2
    assert after == before
    assert Verb.objects.get(name="unit.v0").phrases.count() == 44
