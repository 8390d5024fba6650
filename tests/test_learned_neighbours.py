"""The learned neighbours of a query: the global phrases walked on their own HNSW index, a user's own phrases
compared exactly through their b-tree, the nearest of both kept; a user with many phrases walks the index over
every phrase as one part. Both ways answer the exact nearest neighbours in scope.

The phrases are random unit vectors, the hardest case for an HNSW graph: with the deployment's ``hnsw.ef_search``
a walk may miss a true neighbour, and which one depends on the levels the index drew at random when it was built.
The fixture raises ``ef_search`` above the number of rows for its transaction, so every walk is exhaustive and
what these tests compare is how the parts are chosen and merged, not the index's recall."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from common.text import text_hash
from embeddings.embedders import current_model_name
from learning.models import LearnedPhrase, PhraseEvidence, Verb
from learning.selectors import learned_exact, tier_rows
from learning.services.catalogue import verb_catalogue_load
from tenants.context import acting_agent
from tests.conftest import CBU_CATALOGUE

pytestmark = pytest.mark.django_db

K = 8


@pytest.fixture
def phrases(settings):
    """60 global phrases, 40 users with 6 phrases each, "light" with 6, "heavy" with 30 (over the setting's 20),
    and "private" with 6 taught through an agent with private user data (and 6 shared ones of the same user)."""
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 20
    verb_catalogue_load(entries=CBU_CATALOGUE)
    verbs = list(Verb.objects.order_by("name"))
    secret = Agent.objects.create(name="secret-bot", private_user_data=True)
    rng = np.random.default_rng(11)
    model = current_model_name()
    rows, n = [], 0

    def add(user, count, agent=None):
        nonlocal n
        for _ in range(count):
            v = rng.normal(size=384).astype(np.float32)
            text = f"learned phrase {n}"
            rows.append(
                LearnedPhrase(
                    phrase=text,
                    normalized=text,
                    verb=verbs[n % len(verbs)],
                    user_id=user,
                    private_agent=agent,
                    source="manual",
                    embedding=v / np.linalg.norm(v),
                    embedding_model=model,
                    embedding_hash=text_hash(text),
                )
            )
            n += 1

    add(None, 60)
    for u in range(40):
        add(f"u{u}", 6)
    add("light", 6)
    add("heavy", 30)
    add("private", 6)
    add("private", 6, agent=secret)
    LearnedPhrase.objects.bulk_create(rows, batch_size=500)
    with connection.cursor() as cur:  # above the rows in the table: a walk visits every row it can reach
        cur.execute("SET LOCAL hnsw.ef_search = 1000")
    return model, rng, secret


def _query(rng):
    q = rng.normal(size=384).astype(np.float32)
    return q / np.linalg.norm(q)


def _exact(q, rows) -> list[tuple[str, float]]:
    """The k nearest rows by cosine, as (phrase, similarity)."""
    scored = sorted(((r.phrase, float(np.dot(q, np.asarray(r.embedding)))) for r in rows), key=lambda x: -x[1])
    return [(p, round(s, 4)) for p, s in scored[:K]]


def _tier_rows(q, model, user_id, **kwargs):
    return tier_rows(
        normalized="no such text",
        vector=q,
        model=model,
        user_id=user_id,
        domain=None,
        k_learned=K,
        k_catalogue=5,
        k_blocks=5,
        block_threshold=0.9,
        **kwargs,
    )


def _learned(q, model, user_id, own_exact, global_exact=False):
    rows = _tier_rows(q, model, user_id, own_exact=own_exact, global_exact=global_exact)
    return [(h.text, round(h.similarity, 4)) for h in rows.learned]


def test_learned_exact_says_whether_a_users_phrases_and_the_global_ones_are_few_enough_to_compare_exactly(
    phrases, settings, monkeypatch
):
    from learning.selectors import tiers

    def counted(user_id):
        hits = learned_exact(normalized="x", user_id=user_id, domain=None)
        return hits.own_exact, hits.global_exact

    assert counted("light") == (True, True)  # 6 of the user's, 60 global: few enough
    assert counted("nobody") == (True, True)  # none at all
    assert counted("heavy") == (False, True)  # 30 > 20
    assert counted(None) == (False, True)  # no user: nothing of theirs
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 30
    assert counted("heavy") == (True, True)  # the limit itself
    monkeypatch.setattr(tiers, "GLOBAL_EXACT_MAX_PHRASES", 59)
    assert counted(None) == (False, False)  # 60 global phrases: walked
    monkeypatch.setattr(tiers, "GLOBAL_EXACT_MAX_PHRASES", 60)
    assert counted(None) == (False, True)
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 0  # off: every phrase is walked
    assert counted("light") == (False, False)


def test_learned_exact_says_whether_the_user_has_taught_a_phrase_of_their_own_in_the_querys_scope(phrases):
    """Whether the asking user is a newcomer to the decision: an active phrase of their own, of a verb in force, in
    the domain asked about, seen by the acting agent (one with private user data sees only what was taught through
    it)."""
    _model, _rng, secret = phrases

    def taught(user_id, domain=None):
        return learned_exact(normalized="x", user_id=user_id, domain=domain).taught

    assert taught("light") and taught("heavy") and taught("u3")
    assert not taught("nobody") and not taught(None)  # no phrase of theirs; no user: no one's
    light = LearnedPhrase.objects.filter(user_id="light")
    one = Verb.objects.order_by("name").first()
    light.update(verb=one)
    other = Verb.objects.exclude(domain=one.domain).values_list("domain", flat=True).first()
    assert other is not None
    assert taught("light", one.domain) and not taught("light", other)  # none in that domain
    light.filter(pk__in=list(light.values_list("pk", flat=True)[:5])).update(is_active=False)
    assert taught("light")  # one active phrase is enough
    light.update(is_active=False)
    assert not taught("light")  # retired phrases teach nothing
    light.update(is_active=True)
    Verb.objects.filter(pk__in=light.values("verb_id")).update(is_active=False)
    assert not taught("light")  # nor phrases of verbs out of force
    Verb.objects.update(is_active=True)
    LearnedPhrase.objects.filter(user_id="private", private_agent__isnull=True).delete()
    assert not taught("private")  # what was taught through the private agent is not seen without it
    with acting_agent(secret):
        assert taught("private")
        assert not taught("light")  # nor is what was taught without it seen through it


@pytest.mark.parametrize("user_id", ["light", "heavy", "nobody", None])
def test_both_ways_answer_the_nearest_global_and_own_phrases(phrases, user_id):
    """Split (global walked, own exact) or one walk: the k nearest of the global phrases and the user's own, in
    order of similarity; never another user's."""
    model, rng, _ = phrases
    in_scope = list(LearnedPhrase.objects.filter(user_id__isnull=True)) + list(
        LearnedPhrase.objects.filter(user_id=user_id, private_agent__isnull=True) if user_id else []
    )
    for _ in range(5):
        q = _query(rng)
        expected = _exact(q, in_scope)
        for own_exact in (True, False):
            for global_exact in (True, False):
                assert _learned(q, model, user_id, own_exact, global_exact) == expected


def test_a_users_own_phrases_count_when_the_global_ones_are_fewer_than_asked(phrases):
    """With fewer global phrases than k, the walk comes back short and runs again exactly; the user's exact part is
    kept, not lost or counted twice."""
    model, rng, _ = phrases
    LearnedPhrase.objects.filter(user_id__isnull=True).exclude(
        pk__in=LearnedPhrase.objects.filter(user_id__isnull=True).order_by("pk").values("pk")[:3]
    ).delete()
    in_scope = list(LearnedPhrase.objects.filter(user_id__isnull=True)) + list(LearnedPhrase.objects.filter(user_id="light"))
    assert len(in_scope) == 9
    q = _query(rng)
    got = _learned(q, model, "light", own_exact=True)
    assert got == _exact(q, in_scope) and len({p for p, _ in got}) == K


def test_few_global_phrases_are_compared_exactly_in_the_one_round_trip(phrases, settings):
    """A deployment with few global phrases (before any import) has them compared exactly: no walk that comes back
    short and no second statement on every resolve."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    model, rng, _ = phrases
    LearnedPhrase.objects.filter(user_id__isnull=True).exclude(
        pk__in=LearnedPhrase.objects.filter(user_id__isnull=True).order_by("pk").values("pk")[:3]
    ).delete()
    hits = learned_exact(normalized="x", user_id="light", domain=None)
    assert (hits.own_exact, hits.global_exact) == (True, True)
    in_scope = list(LearnedPhrase.objects.filter(user_id__isnull=True)) + list(LearnedPhrase.objects.filter(user_id="light"))
    q = _query(rng)
    with CaptureQueriesContext(connection) as one:
        got = _learned(q, model, "light", own_exact=True, global_exact=True)
    assert got == _exact(q, in_scope)
    assert sum("learning_learnedphrase" in query["sql"] for query in one.captured_queries) == 1
    with CaptureQueriesContext(connection) as walked:
        assert _learned(q, model, "light", own_exact=True, global_exact=False) == got
    reruns = [query["sql"] for query in walked.captured_queries if "learning_learnedphrase" in query["sql"]]
    assert len(reruns) == 2 and "learning_phraseblock" not in reruns[1]  # only the short tier runs again


def test_an_agent_with_private_user_data_reads_its_own_phrases_of_the_user_and_the_global_ones(phrases):
    model, rng, secret = phrases
    with acting_agent(secret):
        mine = list(LearnedPhrase.objects.filter(user_id__isnull=True)) + list(
            LearnedPhrase.objects.filter(user_id="private", private_agent=secret)
        )
        for _ in range(3):
            q = _query(rng)
            assert _learned(q, model, "private", own_exact=True) == _exact(q, mine)
    shared = list(LearnedPhrase.objects.filter(user_id__isnull=True)) + list(
        LearnedPhrase.objects.filter(user_id="private", private_agent__isnull=True)
    )
    q = _query(rng)
    assert _learned(q, model, "private", own_exact=True) == _exact(q, shared)


def test_the_global_phrases_have_an_hnsw_index_of_their_own():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'learnedphrase_global_hnsw'")
        (definition,) = cursor.fetchone()
    assert "USING hnsw" in definition and "vector_cosine_ops" in definition and "WHERE (user_id IS NULL)" in definition


@pytest.fixture
def evidence(phrases):
    """Feedback evidence near one direction: "light" has 6 rows, "heavy" 30 (over the setting's 20), 40 other users
    8 each (a crowd of near-identical vectors in the evidence's HNSW index), "nobody" none."""
    model, rng, _ = phrases
    base = _query(rng)
    rows = []

    def add(user, count):
        for i in range(count):
            v = base + rng.normal(scale=0.05, size=384).astype(np.float32)
            text = f"evidence {user} {i}"
            rows.append(
                PhraseEvidence(
                    user_id=user,
                    phrase=text,
                    normalized=text,
                    verb=f"verb.{i % 3}",
                    negative=1.0,
                    embedding=v / np.linalg.norm(v),
                    embedding_model=model,
                    embedding_hash=text_hash(text),
                )
            )

    add("light", 6)
    add("heavy", 30)
    for u in range(40):
        add(f"u{u}", 8)
    PhraseEvidence.objects.bulk_create(rows, batch_size=500)
    return model, base


def _evidence(q, model, user_id, evidence_exact):
    rows = _tier_rows(q, model, user_id, k_evidence=K, evidence_similarity=0.0, evidence_exact=evidence_exact)
    return sorted((verb, round(s, 4)) for verb, s, _ in rows.evidence)


def test_learned_exact_counts_the_evidence_of_the_querys_scope(evidence, settings):
    def counted(user_id):
        return learned_exact(normalized="x", user_id=user_id, domain=None).evidence_exact

    assert counted("light") and counted("nobody") and counted(None)  # 6, none, no global rows
    assert not counted("heavy")  # 30 > 20
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 30
    assert counted("heavy")
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 0  # off: the index is walked
    assert not counted("light")
    settings.RESOLVE_USER_EXACT_MAX_PHRASES = 20
    settings.RESOLVE_USE_FEEDBACK_PENALTY = False  # the resolver reads no evidence: nothing counted
    assert not counted("light")


def test_the_evidence_count_is_of_the_acting_agents_kind(phrases, evidence, settings):
    """An agent with private user data reads only the evidence it gathered: the shared rows of a user do not count
    for it, its own do."""
    model, rng, secret = phrases

    def counted(user_id):
        with acting_agent(secret):
            return learned_exact(normalized="x", user_id=user_id, domain=None).evidence_exact

    assert counted("heavy")  # 30 shared rows, none of the private agent's
    PhraseEvidence.objects.filter(user_id="heavy").update(private_agent=secret)
    assert not counted("heavy")
    assert learned_exact(normalized="x", user_id="heavy", domain=None).evidence_exact  # the shared kind: none now


@pytest.mark.parametrize("user_id", ["light", "heavy", "nobody"])
def test_evidence_compared_exactly_or_walked_answers_the_users_nearest_rows(evidence, user_id):
    """Few rows are compared exactly (no walk of an index crowded by other users' evidence); either way the answer
    is the user's own nearest evidence, never another user's."""
    model, base = evidence
    mine = list(PhraseEvidence.objects.filter(user_id=user_id))
    expected = sorted(
        sorted(((r.verb, round(float(np.dot(base, np.asarray(r.embedding))), 4)) for r in mine), key=lambda x: -x[1])[:K]
    )
    exact = _evidence(base, model, user_id, evidence_exact=True)
    assert exact == expected
    walked = _evidence(base, model, user_id, evidence_exact=False)
    assert set(walked) <= {(r.verb, round(float(np.dot(base, np.asarray(r.embedding))), 4)) for r in mine}
    assert len(walked) == min(K, len(mine))  # 356 rows in all: the iterative walk reaches every one


def test_the_evidence_part_compares_exactly_only_when_told(evidence):
    """The tier statement is prepared once per text, and its generic plan cannot tell a user with no evidence from
    one with much: the exact comparison has to be in the text (a distance "+ 0", no indexed ordering)."""
    model, base = evidence

    def evidence_part(evidence_exact):
        with CaptureQueriesContext(connection) as ctx:
            _evidence(base, model, "light", evidence_exact)
        sql = next(q["sql"] for q in ctx.captured_queries if "learning_phraseevidence" in q["sql"])
        return sql[sql.index("FROM learning_phraseevidence") :].split(") x", 1)[0]

    assert "ORDER BY (t.embedding <=> (SELECT v FROM q)) + 0" in evidence_part(True)
    assert "ORDER BY d " in evidence_part(False)
