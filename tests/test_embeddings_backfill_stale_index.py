"""The backfill finds rows needing a vector by index lookups, not by hashing every row, and still finds every kind:
missing, another model, other text however it was written (a queryset ``.update()`` too), no direction."""

import numpy as np
import pytest
from django.db import connection

from common.text import text_hash
from embeddings.embedders import DIMENSION, MIN_NORM, get_embedder
from embeddings.selectors import embedding_rows_needing_work
from embeddings.services import embeddings_backfill
from learning.models import LearnedPhrase, VerbPhrase
from memories.models import Memory
from tests.conftest import make_memory


def _unit(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).normal(size=DIMENSION)
    return (vector / np.linalg.norm(vector)).tolist()


def _needing(model) -> list[int]:
    return list(embedding_rows_needing_work(model, current_model=get_embedder().model_name).values_list("pk", flat=True))


@pytest.fixture
def phrases(catalogue):
    """Learned phrases with current vectors (the verb's, so nothing is embedded to make them)."""
    model, verb = get_embedder().model_name, catalogue["cbu.list"]
    rows = [
        LearnedPhrase(
            phrase=f"phrase {i}",
            normalized=f"phrase {i}",
            verb=verb,
            user_id="u1",
            embedding=_unit(i),
            embedding_model=model,
            embedding_hash=text_hash(f"phrase {i}"),
        )
        for i in range(6)
    ]
    return LearnedPhrase.objects.bulk_create(rows)


@pytest.mark.django_db
def test_fresh_rows_are_not_found_and_each_kind_of_stale_row_is(phrases):
    assert _needing(LearnedPhrase) == []
    missing, other_model, other_text, zero, tiny, small_but_fine = phrases
    LearnedPhrase.objects.filter(pk=missing.pk).update(embedding=None)
    LearnedPhrase.objects.filter(pk=other_model.pk).update(embedding_model="another-model")
    LearnedPhrase.objects.filter(pk=other_text.pk).update(embedding_hash=text_hash("something else"))
    LearnedPhrase.objects.filter(pk=zero.pk).update(embedding=[0.0] * DIMENSION)
    # the SQL function's bound is embedders.MIN_NORM: just under it has no direction, just over it does
    LearnedPhrase.objects.filter(pk=tiny.pk).update(embedding=[MIN_NORM / 2] + [0.0] * (DIMENSION - 1))
    LearnedPhrase.objects.filter(pk=small_but_fine.pk).update(embedding=[MIN_NORM * 2] + [0.0] * (DIMENSION - 1))

    assert _needing(LearnedPhrase) == [missing.pk, other_model.pk, other_text.pk, zero.pk, tiny.pk]


@pytest.mark.django_db
def test_a_text_changed_by_a_queryset_update_is_found_and_embedded_again(phrases):
    changed = phrases[2]
    LearnedPhrase.objects.filter(pk=changed.pk).update(normalized="show every client business unit")
    assert _needing(LearnedPhrase) == [changed.pk]

    totals = embeddings_backfill()

    assert totals["embedded"] == 1 and totals["failed"] == 0
    changed.refresh_from_db()
    assert changed.embedding_hash == text_hash("show every client business unit")
    assert np.allclose(changed.embedding, get_embedder().embed("show every client business unit"), atol=1e-5)
    assert _needing(LearnedPhrase) == []


@pytest.mark.django_db
def test_a_catalogue_phrase_and_a_memory_changed_by_update_are_found(catalogue):
    verb_phrase = VerbPhrase.objects.order_by("pk").first()
    memory = make_memory()
    assert memory.pk in _needing(Memory)  # stored without a vector
    embeddings_backfill()
    assert _needing(VerbPhrase) == [] and _needing(Memory) == []

    VerbPhrase.objects.filter(pk=verb_phrase.pk).update(normalized="list all client business units please")
    Memory.objects.filter(pk=memory.pk).update(content="Always back up the database before a migration.")

    assert _needing(VerbPhrase) == [verb_phrase.pk]
    assert _needing(Memory) == [memory.pk]


def _plan(sql: str, params) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
def test_the_query_reads_the_indexes_not_the_rows(catalogue):
    model, verb = get_embedder().model_name, catalogue["cbu.list"]
    vector = _unit(0)
    LearnedPhrase.objects.bulk_create(
        LearnedPhrase(
            phrase=f"p{i}",
            normalized=f"p{i}",
            verb=verb,
            user_id=f"u{i}",
            embedding=vector,
            embedding_model=model,
            embedding_hash=text_hash(f"p{i}"),
        )
        for i in range(3000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learning_learnedphrase")  # also runs embedding_stale under the restricted search_path
        cursor.execute("SET LOCAL enable_seqscan = off")
    pending = embedding_rows_needing_work(LearnedPhrase, current_model=model)

    for query in (pending, pending.filter(pk__gt=0)[:128]):  # the backfill's count, and one of its batches
        sql, params = query.query.sql_with_params()
        plan = _plan(sql, params)
        assert "Bitmap Index Scan on learnedphrase_emb_stale" in plan, plan
        assert "Bitmap Index Scan on learnedphrase_emb_model" in plan, plan
        assert "learning_learnedphrase_pkey" not in plan, plan  # not every row by id, its text hashed
