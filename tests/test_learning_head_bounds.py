"""A head trains on at most RESOLVE_HEAD_MAX_SHARED_PHRASES shared learned phrases: beyond it every verb keeps its
most confident, then newest, phrases, as many as the bound leaves room for; the catalogue's phrases always stay."""

import numpy as np
import pytest

from common.text import text_hash
from embeddings.embedders import current_model_name
from learning import selectors
from learning.models import LearnedPhrase, Verb, VerbPhrase
from learning.selectors.decisions import per_verb_quota
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_CATALOGUE

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("counts", "bound", "quota"),
    [
        ({"a": 3, "b": 4}, 7, None),  # all fit
        ({"a": 10, "b": 2}, 6, 4),  # b keeps its 2, a the 4 left
        ({"a": 10, "b": 10, "c": 1}, 9, 4),  # c keeps 1, a and b share 8
        ({"a": 5, "b": 5}, 3, 1),  # an equal share, rounded down
        ({"a": 5, "b": 5, "c": 5}, 2, 1),  # every verb keeps one, even beyond the bound
    ],
)
def test_the_quota_shares_the_bound_among_the_verbs(counts, bound, quota):
    assert per_verb_quota(counts, bound) == quota
    if quota is not None and bound >= len(counts):
        assert sum(min(n, quota) for n in counts.values()) <= bound


def test_a_head_reads_each_verbs_most_confident_newest_phrases_within_the_bound(settings):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    model = current_model_name()
    big, small = Verb.objects.order_by("name")[:2]
    rng = np.random.default_rng(3)
    rows = []
    for verb, n in ((big, 10), (small, 2)):
        for i in range(n):
            text = f"{verb.name} phrase {i}"
            vector = rng.normal(size=384).astype(np.float32)
            rows.append(
                LearnedPhrase(
                    phrase=text,
                    normalized=text,
                    verb=verb,
                    source="manual",
                    confidence=0.9 if i in (2, 5) else 0.5,
                    embedding=vector / np.linalg.norm(vector),
                    embedding_model=model,
                    embedding_hash=text_hash(text),
                )
            )
    LearnedPhrase.objects.bulk_create(rows)
    LearnedPhrase.objects.create(  # a user's own phrase: never a shared anchor
        phrase="mine",
        normalized="mine",
        verb=big,
        user_id="alice",
        source="manual",
        embedding=rows[0].embedding,
        embedding_model=model,
        embedding_hash=text_hash("mine"),
    )
    catalogue = VerbPhrase.objects.filter(embedding_model=model, embedding__isnull=False).count()

    every = selectors.decision_anchor_rows(model=model)
    assert sum(every[2]) == 12 and len(every[0]) == catalogue + 12

    settings.RESOLVE_HEAD_MAX_SHARED_PHRASES = 6
    vectors, names, learned, confidence, texts = selectors.decision_anchor_rows(model=model)
    assert len(vectors) == catalogue + 6 and not any(learned[:catalogue])  # the catalogue's phrases all stay
    kept = sorted(t for t, is_learned in zip(texts, learned, strict=True) if is_learned)
    # the small verb keeps both; the big one its two confident phrases, then its two newest
    assert kept == sorted([f"{small.name} phrase 0", f"{small.name} phrase 1"] + [f"{big.name} phrase {i}" for i in (2, 5, 9, 8)])
    assert selectors.decision_anchor_rows(model=model)[4] == texts  # the same rows, in the same order, every read
