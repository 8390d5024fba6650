"""An alias lookup that finds no alias spelled the same compares the text with the aliases of its scope (the user's
and the global ones, of the entity type asked for): it counts them first, through ``entityalias_scope``, and
compares them exactly while they are few. The unique index leads with the text, so counting through it read every
alias of every user."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from embeddings.embedders import current_model_name, embed_query
from learning.models import EntityAlias
from learning.selectors.aliases import entity_alias_resolve

pytestmark = pytest.mark.django_db

QUERY = "the big blue company"


@pytest.fixture
def crowded():
    """3,000 aliases of 300 users in 10 entity types and 50 global ones; one alias of "u7" and one global alias,
    both of type "t7", carry the query's own vector, and so does one of "u8"."""
    model = current_model_name()
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(64, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query, _, _ = embed_query(QUERY)

    def alias(name, user, kind, vector):
        return EntityAlias(
            alias=name,
            normalized=name,
            canonical_name=f"{name} (canonical)",
            entity_type=kind,
            user_id=user,
            embedding=vector,
            embedding_model=model,
        )

    rows = [alias(f"alias {i}", f"u{i % 300}", f"t{i % 10}", vectors[i % 64]) for i in range(3000)]
    rows += [alias(f"global alias {i}", None, f"t{i % 10}", vectors[i % 64]) for i in range(50)]
    rows += [alias("ibm of u7", "u7", "t7", query), alias("ibm of u8", "u8", "t7", query), alias("ibm", None, "t7", query)]
    EntityAlias.objects.bulk_create(rows, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learning_entityalias")


def _plans(entity_type):
    """The answer, and the plans of the statements that read the scope: its count and its exact comparison."""
    with CaptureQueriesContext(connection) as seen:
        answer = entity_alias_resolve(text=QUERY, user_id="u7", entity_type=entity_type)
    reads = [q["sql"] for q in seen.captured_queries if "learning_entityalias" in q["sql"]]
    scope = [sql for sql in reads if sql.upper().startswith("SELECT COUNT(") or "+ 0" in sql]
    plans = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # so a small table's plan shows which index serves it
        for sql in scope:
            cursor.execute("EXPLAIN " + sql)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return answer, plans


@pytest.mark.parametrize("entity_type", ["t7", None])
def test_the_scope_of_a_lookup_is_counted_and_compared_through_its_own_index(crowded, entity_type):
    answer, plans = _plans(entity_type)
    assert len(plans) == 2  # the count, then the exact comparison of so few aliases
    for plan in plans:
        assert "on entityalias_scope" in plan and "entityalias_unique_per_scope" not in plan, plan
    assert answer["outcome"] == "semantic"
    # the user's alias first, then the global one; never another user's
    assert [(m["alias"], m["scope"]) for m in answer["matches"][:2]] == [("ibm of u7", "user"), ("ibm", "global")]
    assert all(m["user_id"] in ("u7", None) for m in answer["matches"])


def test_an_inactive_alias_is_out_of_the_index_and_of_the_answer(crowded):
    EntityAlias.objects.filter(alias="ibm of u7").update(is_active=False)
    answer, plans = _plans("t7")
    assert len(plans) == 2 and all("on entityalias_scope" in plan for plan in plans), plans
    assert [m["alias"] for m in answer["matches"]] == ["ibm"]
