"""Nearest-neighbour reads stay right when the HNSW graph is crowded with identical vectors.

Two hundred users who learned the same twelve phrases put 2,400 identical vectors in the index; a filtered HNSW
scan for a thirteenth user then often returns fewer rows than asked, even with iterative scans, and sometimes rows
that are not the user's nearest. A small scope is scanned exactly; a larger one walks the index and falls back to
an exact scan of the rows in scope when the walk comes back short.
"""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from common.text import text_hash
from embeddings.embedders import current_model_name
from embeddings.selectors import nearest
from learning.models import LearnedPhrase, Verb
from learning.selectors import tier_rows
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_CATALOGUE

pytestmark = pytest.mark.django_db

PHRASES = [f"shared phrase number {i}" for i in range(12)]


@pytest.fixture
def crowded():
    verb_catalogue_load(entries=CBU_CATALOGUE)
    verbs = list(Verb.objects.order_by("name"))
    rng = np.random.default_rng(7)
    base = rng.normal(size=(len(PHRASES), 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    model = current_model_name()
    rows = []
    for user in [f"u{n}" for n in range(200)] + ["target"]:
        for i, text in enumerate(PHRASES):
            rows.append(
                LearnedPhrase(
                    phrase=text,
                    normalized=text,
                    verb=verbs[i % len(verbs)],
                    user_id=user,
                    source="manual",
                    embedding=base[i],
                    embedding_model=model,
                    embedding_hash=text_hash(text),
                )
            )
    LearnedPhrase.objects.bulk_create(rows, batch_size=500)
    return base, model, rng


def _queries(base, rng):
    for v in base:
        q = v + rng.normal(scale=0.3, size=384)
        yield (q / np.linalg.norm(q)).astype(np.float32)


def test_a_small_scope_answers_the_true_nearest_rows(crowded):
    base, _, rng = crowded
    mine = LearnedPhrase.objects.filter(user_id="target")
    for q in _queries(base, rng):
        rows = nearest(mine, q, 5)
        assert all(r.user_id == "target" for r in rows)
        distances = [r.distance for r in rows]
        exact = sorted(float(np.dot(-q, b)) for b in base)[:5]  # the true five nearest, as 1 - cosine - 1
        assert [round(d - 1.0, 4) for d in distances] == [round(e, 4) for e in exact]


def test_a_scope_above_the_exact_limit_walks_the_index_and_never_comes_back_short(crowded, settings):
    base, _, rng = crowded
    settings.NEAREST_EXACT_MAX_ROWS = 11  # the user's 12 rows are one too many
    mine = LearnedPhrase.objects.filter(user_id="target")
    for q in _queries(base, rng):
        with CaptureQueriesContext(connection) as ctx:
            rows = nearest(mine, q, 5)
        walks = [c["sql"] for c in ctx.captured_queries if "<=>" in c["sql"] and "+ 0" not in c["sql"]]
        assert len(walks) == 1  # the index was asked first
        assert len(rows) == 5
        assert all(r.user_id == "target" for r in rows)
        distances = [r.distance for r in rows]
        assert distances == sorted(distances)
        assert set(round(d - 1.0, 4) for d in distances) <= set(round(float(np.dot(-q, b)), 4) for b in base)


def test_the_resolver_sees_every_learned_anchor_of_the_user(crowded):
    base, model, rng = crowded
    for q in _queries(base, rng):
        rows = tier_rows(
            normalized="anything",
            vector=q,
            model=model,
            user_id="target",
            domain=None,
            k_learned=12,
            k_catalogue=30,
            k_blocks=5,
            block_threshold=0.99,
        )
        assert len(rows.learned) == 12
        assert {h.user_id for h in rows.learned} == {"target"}
