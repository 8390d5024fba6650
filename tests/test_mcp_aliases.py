"""POST /api/v1/aliases/resolve: learned entity aliases answer (exact, then by meaning; the user's own, then global)."""

import pytest

from agents.models import Scope
from embeddings.services import embedding_assign, embeddings_compute
from learning.models import EntityAlias
from tests.conftest import make_client

URL = "/api/v1/aliases/resolve"


def alias(text, canonical, user_id=None, entity_type="company", **kw):
    row = EntityAlias(
        alias=text, normalized=text.casefold(), canonical_name=canonical, entity_type=entity_type, user_id=user_id, **kw
    )
    vectors, model = embeddings_compute(texts=[row.normalized])
    embedding_assign(rows=[row], vectors=vectors, model=model)
    row.save()
    return row


@pytest.fixture
def aliases(db):
    alias("big blue", "IBM")
    alias("big blue", "Blue Bank Ltd", user_id="alice")
    alias("the fruit company", "Apple")
    alias("old name", "Gone Inc", is_active=False)


def post(api, **body):
    response = api.post(URL, body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_exact_the_users_own_alias_before_the_global_one(api, aliases):
    bob = post(api, text="Big Blue", user_id="bob")
    assert (bob["outcome"], bob["canonical_name"]) == ("exact", "IBM")
    assert bob["matches"][0]["scope"] == "global" and bob["matches"][0]["score"] == 1.0
    alice = post(api, text="big blue", user_id="alice")
    assert alice["canonical_name"] == "Blue Bank Ltd" and [m["canonical_name"] for m in alice["matches"]] == ["Blue Bank Ltd"]
    assert post(api, text="big blue")["canonical_name"] == "IBM"  # no user: global aliases only


def test_semantic_when_nothing_is_spelled_the_same(api, aliases):
    body = post(api, text="the big blue", user_id="bob")
    assert body["outcome"] == "semantic" and body["canonical_name"] == "IBM"
    assert 0.8 <= body["matches"][0]["score"] < 1.0
    assert post(api, text="the big blue", user_id="alice")["canonical_name"] == "Blue Bank Ltd"


def test_no_match_inactive_and_filters(api, aliases):
    assert post(api, text="weather tomorrow") == {
        "text": "weather tomorrow",
        "normalized": "weather tomorrow",
        "outcome": "no_match",
        "canonical_name": None,
        "entity_type": None,
        "matches": [],
        "degraded": False,
        "degraded_reason": "",
    }
    assert post(api, text="old name")["outcome"] == "no_match"
    assert post(api, text="big blue", entity_type="person")["outcome"] == "no_match"


def test_validation_and_scope(db, api, aliases):
    bad = api.post(URL, {"limit": 0}, format="json")
    assert bad.status_code == 400 and set(bad.json()["fields"]) >= {"text"}
    invisible = api.post(URL, {"text": "\u200b\u2060"}, format="json")  # nothing visible: blank
    assert invisible.status_code == 400 and "text" in invisible.json()["fields"]
    governance_only = make_client([Scope.GOVERNANCE], name="gov-only")
    assert governance_only.post(URL, {"text": "big blue"}, format="json").status_code == 403
