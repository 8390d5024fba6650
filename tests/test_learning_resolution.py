"""The resolution pipeline: tier order, isolation, blocklist, ambiguity, degraded mode."""

import datetime

import pytest
from django.utils import timezone

from learning.models import LearnedPhrase
from learning.resolution import resolve
from learning.services.blocks import phrase_block_create
from learning.services.phrases import learned_phrase_upsert

pytestmark = pytest.mark.django_db


def test_catalogue_exact_phrase_resolves(catalogue):
    r = resolve(text="List all CBUs!")
    assert r.outcome == "resolved"
    assert r.verb == "cbu.list"
    assert r.candidates[0].source == "phrase_exact"
    assert r.candidates[0].matched_phrase == "list all cbus"


def test_catalogue_semantic_cold_start(catalogue):
    r = resolve(text="please get rid of that client business unit")
    assert r.candidates[0].verb == "cbu.delete"
    assert r.candidates[0].source in {"semantic", "phrase_substring"}


def test_user_exact_beats_global_exact(catalogue):
    learned_phrase_upsert(phrase="do the thing", verb=catalogue["email.send"])
    learned_phrase_upsert(phrase="do the thing", verb=catalogue["cbu.create"], user_id="alice")
    alice = resolve(text="do the thing", user_id="alice")
    assert (alice.verb, alice.candidates[0].source) == ("cbu.create", "user_learned_exact")
    bob = resolve(text="do the thing", user_id="bob")
    assert (bob.verb, bob.candidates[0].source) == ("email.send", "learned_exact")
    anonymous = resolve(text="do the thing")
    assert anonymous.verb == "email.send"


def test_learned_exact_beats_catalogue_phrase(catalogue):
    learned_phrase_upsert(phrase="list all cbus", verb=catalogue["cbu.create"], user_id="alice")
    assert resolve(text="list all cbus", user_id="alice").verb == "cbu.create"
    assert resolve(text="list all cbus", user_id="bob").verb == "cbu.list"


def test_learned_phrase_is_a_semantic_anchor(catalogue):
    learned_phrase_upsert(phrase="spin up a fresh business unit for the client", verb=catalogue["cbu.create"], user_id="alice")
    r = resolve(text="spin up a new business unit for this client", user_id="alice")
    assert r.candidates[0].verb == "cbu.create"
    assert r.candidates[0].source == "user_learned_semantic"
    assert r.candidates[0].matched_phrase == "spin up a fresh business unit for the client"


def test_user_phrases_never_change_other_users(catalogue):
    before = resolve(text="ping the boss about it", user_id="bob")
    learned_phrase_upsert(phrase="ping the boss about it", verb=catalogue["cbu.delete"], user_id="alice")
    learned_phrase_upsert(phrase="ping the boss regarding this", verb=catalogue["cbu.delete"], user_id="alice")
    after = resolve(text="ping the boss about it", user_id="bob")
    assert [(c.verb, c.score, c.source) for c in after.candidates] == [(c.verb, c.score, c.source) for c in before.candidates]
    assert all(not c.source.startswith("user_") for c in after.candidates)
    assert resolve(text="ping the boss about it", user_id="alice").verb == "cbu.delete"


def test_blocked_verb_disappears_for_paraphrases_and_returns_after_expiry(catalogue):
    assert resolve(text="show my client business units").verb == "cbu.list"
    block = phrase_block_create(
        phrase="show my client business units",
        verb=catalogue["cbu.list"],
        reason="test",
        expires_at=timezone.now() + datetime.timedelta(hours=1),
    )
    for text in ["show my client business units", "show me my client business units", "display my client business units"]:
        r = resolve(text=text)
        assert "cbu.list" not in [c.verb for c in r.candidates], text
    block.expires_at = timezone.now() - datetime.timedelta(seconds=1)
    block.save()
    assert resolve(text="show my client business units").verb == "cbu.list"


def test_user_block_does_not_affect_other_users(catalogue):
    phrase_block_create(phrase="list all cbus", verb=catalogue["cbu.list"], user_id="alice")
    assert "cbu.list" not in [c.verb for c in resolve(text="list all cbus", user_id="alice").candidates]
    assert resolve(text="list all cbus", user_id="bob").verb == "cbu.list"


def test_block_applies_to_learned_exact_matches(catalogue):
    learned_phrase_upsert(phrase="wipe it", verb=catalogue["cbu.delete"])
    assert resolve(text="wipe it").verb == "cbu.delete"
    phrase_block_create(phrase="wipe it", verb=catalogue["cbu.delete"])
    assert "cbu.delete" not in [c.verb for c in resolve(text="wipe it").candidates]


def test_ambiguous_when_top_two_within_margin(catalogue, settings):
    text = "business unit for the client"
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.0}
    clear = resolve(text=text)
    assert clear.outcome == "resolved" and len(clear.candidates) >= 2
    gap = clear.candidates[0].score - clear.candidates[1].score
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": gap + 0.01}
    r = resolve(text=text)
    assert r.outcome == "ambiguous"
    assert r.verb is None
    assert [o.verb for o in r.options[:2]] == [c.verb for c in clear.candidates[:2]]
    assert all(o.display_name and o.example and o.score > 0 for o in r.options)


def test_limit_shapes_the_answer_not_the_decision(catalogue, settings):
    """A caller asking for one candidate still gets the margin check: limit trims what is shown, nothing else."""
    text = "business unit for the client"
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.0}
    clear = resolve(text=text)
    settings.RESOLUTION_OVERRIDES = {
        "resolve_threshold": 0.0,
        "margin": clear.candidates[0].score - clear.candidates[1].score + 0.01,
    }
    one = resolve(text=text, limit=1)
    assert (one.outcome, one.verb, len(one.candidates)) == ("ambiguous", None, 1)
    assert [o.verb for o in one.options[:2]] == [c.verb for c in clear.candidates[:2]]  # still a choice to make


def test_confident_user_exact_wins_without_asking(catalogue):
    learned_phrase_upsert(phrase="handle the unit", verb=catalogue["cbu.create"], user_id="alice", confidence=0.9)
    learned_phrase_upsert(phrase="handle the unit", verb=catalogue["cbu.delete"], confidence=1.0)
    r = resolve(text="handle the unit", user_id="alice")
    assert (r.outcome, r.verb) == ("resolved", "cbu.create")


def test_ambiguous_when_top_score_under_threshold(catalogue, settings):
    settings.RESOLUTION_OVERRIDES = {"margin": 0.0}
    r = resolve(text="get rid of the client unit")
    top = r.candidates[0].score
    assert top < 1.0
    settings.RESOLUTION_OVERRIDES = {"margin": 0.0, "resolve_threshold": top + 0.001}
    r = resolve(text="get rid of the client unit")
    assert r.outcome == "ambiguous" and r.options[0].verb == r.candidates[0].verb
    settings.RESOLUTION_OVERRIDES = {"margin": 0.0, "resolve_threshold": top - 0.001}
    assert resolve(text="get rid of the client unit").outcome == "resolved"


def test_no_match_for_unrelated_text(catalogue):
    r = resolve(text="zebra quantum marmalade")
    assert r.outcome == "no_match"
    assert r.candidates == []


def test_domain_filter(catalogue):
    r = resolve(text="send an email", domain="cbu")
    assert all(c.verb.startswith("cbu.") for c in r.candidates)
    assert "email.send" not in [c.verb for c in r.candidates]


def test_candidates_are_deduplicated_per_verb(catalogue):
    learned_phrase_upsert(phrase="list every cbu", verb=catalogue["cbu.list"])
    r = resolve(text="list every cbu please")
    verbs = [c.verb for c in r.candidates]
    assert len(verbs) == len(set(verbs))


def test_degraded_mode_answers_from_exact_and_phrase_tiers(catalogue, failing_embedder):
    learned_phrase_upsert(phrase="my magic words", verb=catalogue["email.send"])
    assert LearnedPhrase.objects.get(normalized="my magic words").embedding is None
    r = resolve(text="my magic words")
    assert r.verb == "email.send"
    r = resolve(text="list all cbus")
    assert (r.verb, r.degraded) == ("cbu.list", True)
    assert r.degraded_reason
    r = resolve(text="something nobody said")
    assert r.degraded and r.outcome == "no_match"


def test_hanging_embedder_times_out_degraded(catalogue, settings):
    import time

    from embeddings.embedders import set_embedder

    class Slow:
        model_name = "slow"
        dimension = 384

        def embed(self, text):
            time.sleep(2)
            raise RuntimeError("late")

        def embed_batch(self, texts):
            return [self.embed(t) for t in texts]

    settings.RESOLVE_EMBED_TIMEOUT_S = 0.2
    set_embedder(Slow())
    try:
        started = time.monotonic()
        r = resolve(text="list all cbus")
        assert time.monotonic() - started < 1.5
        assert r.degraded and r.degraded_reason == "embedder timed out"
        assert r.verb == "cbu.list"
    finally:
        set_embedder(None)


def test_vectors_record_model_and_text_hash(catalogue):
    from common.text import text_hash
    from embeddings.embedders import current_model_name

    row = learned_phrase_upsert(phrase="Archive the CBU", verb=catalogue["cbu.delete"], user_id="alice")
    assert row.embedding is not None and len(row.embedding) == 384
    assert row.embedding_model == current_model_name()
    assert row.embedding_hash == text_hash("archive the cbu")


def test_verb_anchor_scores_weigh_the_best_anchors_and_bound_the_unseen():
    from learning.scoring import verb_anchor_scores

    w = (1.0, 0.5, 0.25)
    anchors = {
        "a.many": [
            (0.6, "semantic", "a3"),
            (0.9, "user_learned_semantic", "a1"),
            (0.8, "semantic", "a2"),
            (0.1, "semantic", "a4"),
        ],
        "b.one": [(0.95, "semantic", "b1")],
    }
    # Every tier exhausted: a verb's score is over the anchors it has.
    scores = verb_anchor_scores(anchors, weights=w, unseen=None)
    assert scores["a.many"] == (pytest.approx((0.9 + 0.5 * 0.8 + 0.25 * 0.6) / 1.75), "user_learned_semantic", "a1")
    assert scores["b.one"][0] == pytest.approx(0.95)
    # A tier that hit its limit bounds the anchors not returned: b.one's missing slots count at most 0.5.
    bounded = verb_anchor_scores(anchors, weights=w, unseen=0.5)
    assert bounded["b.one"][0] == pytest.approx((0.95 + 0.5 * 0.5 + 0.25 * 0.5) / 1.75)
    assert bounded["a.many"] == scores["a.many"]


def test_several_close_anchors_outweigh_one(catalogue):
    """A verb supported by several close learned phrases beats one with a single, slightly closer phrase."""
    for phrase in ("show business unit", "show the business unit", "list business units please"):
        learned_phrase_upsert(phrase=phrase, verb=catalogue["cbu.list"], user_id="carol", confidence=1.0)
    single = learned_phrase_upsert(phrase="show my business units", verb=catalogue["cbu.create"], user_id="carol", confidence=1.0)
    r = resolve(text="show business units", user_id="carol")
    scores = {c.verb: c for c in r.candidates}
    assert scores["cbu.create"].matched_phrase == single.phrase  # the single closest phrase...
    assert r.candidates[0].verb == "cbu.list", [(c.verb, c.score) for c in r.candidates]  # ...loses to several close ones


def test_negative_evidence_never_makes_an_auto_resolution(catalogue, settings):
    """Penalties reorder and demote options; they never let a verb run that its own evidence would not have chosen."""
    from learning.resolution import embed_query
    from learning.services.evidence import phrase_evidence_add

    text = "business unit for the client"
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.0}
    clear = resolve(text=text, user_id="alice")
    first, second = clear.candidates[0], clear.candidates[1]
    gap = first.score - second.score
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": gap + 0.01}
    assert resolve(text=text, user_id="alice").outcome == "ambiguous"
    # Alice turned the top verb down for this very text: it drops below the runner-up by more than the margin.
    vector, model, _ = embed_query(text)
    phrase_evidence_add(user_id="alice", phrase=text, verb=first.verb, negative=10.0, vector=vector, model=model)
    r = resolve(text=text, user_id="alice")
    scores = {c.verb: c.score for c in r.candidates}
    assert scores[second.verb] - scores[first.verb] >= gap + 0.01  # the penalty alone would resolve the runner-up ...
    assert (r.outcome, r.verb) == ("ambiguous", None)  # ... but it asks, with the runner-up first
    assert r.options[0].verb == second.verb
    # With a margin the penalised winner would clear on its own, the penalty flips the order: still a question ...
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.01}
    r = resolve(text=text, user_id="alice")
    assert r.candidates[0].verb != first.verb and (r.outcome, r.verb) == ("ambiguous", None)
    # ... until Alice has chosen the new leader for (nearly) these words: "this, not that" decides, it resolves.
    leader = r.candidates[0].verb
    phrase_evidence_add(
        user_id="alice", phrase=text + " please", verb=leader, positive=1.0, vector=embed_query(text + " please")[0], model=model
    )
    assert (resolve(text=text, user_id="alice").outcome, resolve(text=text, user_id="alice").verb) == ("resolved", leader)
    # How near "nearly" is belongs to the profile (measured on the deployment's phrases; overridden here): asked
    # for text nearer than "... please", Alice's choice no longer decides.
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.01, "decide_similarity": 0.9999}
    assert resolve(text=text, user_id="alice").outcome == "ambiguous"
    # A verb that resolves on its own evidence still resolves when a penalty only hits the others.
    phrase_evidence_add(user_id="bob", phrase=text, verb=second.verb, negative=10.0, vector=vector, model=model)
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.0}
    assert (resolve(text=text, user_id="bob").outcome, resolve(text=text, user_id="bob").verb) == ("resolved", first.verb)
    # And a penalty on a verb that would have resolved turns the answer into a question.
    phrase_evidence_add(user_id="carol", phrase=text, verb=first.verb, negative=10.0, vector=vector, model=model)
    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.0, "margin": 0.0001}
    assert resolve(text=text, user_id="carol").outcome == "ambiguous"


def test_the_catalogue_kept_in_process_answers_as_the_query_and_follows_every_edit(catalogue, settings):
    """The catalogue tiers read from process memory give the rows the tier query gives; an edit made anywhere
    (here a raw UPDATE, as another process would make it) shows up on the next resolve, not after a timeout."""
    from embeddings.embedders import current_model_name, get_embedder
    from learning.models import Verb, VerbPhrase
    from learning.selectors.tiers import tier_rows

    model = current_model_name()
    text = "show me the client business units"
    args = {
        "normalized": text,
        "vector": get_embedder().embed(text),
        "model": model,
        "user_id": None,
        "domain": None,
        "k_learned": 5,
        "k_catalogue": 8,
        "k_blocks": 5,
        "block_threshold": 0.9,
    }

    def seen(rows):
        return [(h.verb, round(h.similarity, 5), h.text) for h in rows.catalogue], sorted(rows.phrases)

    in_memory = tier_rows(**args)
    settings.RESOLVE_CATALOGUE_CACHE_PHRASES = 0  # too small to keep: the tier query reads the catalogue
    in_query = tier_rows(**args)
    assert seen(in_memory) == seen(in_query) and len(in_memory.catalogue) == 8
    settings.RESOLVE_CATALOGUE_CACHE_PHRASES = 50000
    assert "cbu.list" in {h.verb for h in tier_rows(**args).catalogue}
    Verb.objects.filter(name="cbu.list").update(is_active=False)
    assert "cbu.list" not in {h.verb for h in tier_rows(**args).catalogue}
    Verb.objects.filter(name="cbu.list").update(is_active=True)
    phrase = VerbPhrase.objects.filter(verb__name="cbu.list").order_by("pk").first()
    VerbPhrase.objects.filter(pk=phrase.pk).update(text="show me the client business units", normalized=text)
    after = tier_rows(**args)
    assert ("cbu.list", "show me the client business units", "exact") in after.phrases


def test_a_tenants_catalogue_stamp_moves_with_its_own_edits_only(catalogue):
    """Triggers stamp a tenant's catalogue on every insert, update and delete of its verbs and phrases (one version
    per statement, from a sequence that never repeats); another tenant's edits leave it alone."""
    from learning.catalogue import VerbEntry
    from learning.models import VerbPhrase
    from learning.selectors.tiers import catalogue_stamp
    from learning.services.catalogue import verb_catalogue_load
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default
    from tenants.services import tenant_create

    home, other = tenant_default().pk, tenant_create(slug="stamped").pk
    with tenant_scope([home]):
        first = catalogue_stamp((home,))
    assert first[0] > 0 and first[1] == 1  # the catalogue fixture's load stamped it
    with tenant_scope([other]):
        verb_catalogue_load(entries=[VerbEntry("cbu.list", "cbu", phrases=["list the units", "show the units"])])
        theirs = catalogue_stamp((other,))
    with tenant_scope([home]):
        assert catalogue_stamp((home,)) == first
        phrase = VerbPhrase.objects.order_by("pk").first()
        VerbPhrase.objects.filter(pk=phrase.pk).update(text="list every unit")
        edited = catalogue_stamp((home,))
        assert edited[0] > theirs[0]
        VerbPhrase.objects.filter(pk=phrase.pk).delete()
        deleted = catalogue_stamp((home,))
        assert deleted[0] > edited[0]
    with tenant_scope([other]):
        assert catalogue_stamp((other,)) == theirs
    with tenant_scope([home, other]):
        assert catalogue_stamp((home, other)) == (deleted[0], 2)


def test_the_exact_fast_path_explains_with_every_key_the_other_rules_give(catalogue):
    """docs/thresholds.md promises rule, probability, cut, fit_version, margin, blocks and penalties on every
    answer: a trusted exact match fills them (nothing computed: null, no blocks, no penalties)."""
    learned_phrase_upsert(phrase="handle the unit", verb=catalogue["cbu.create"], user_id="alice", confidence=1.0)
    exact = resolve(text="handle the unit", user_id="alice")
    assert (exact.outcome, exact.verb, exact.explanation["rule"]) == ("resolved", "cbu.create", "exact")
    other = resolve(text="get rid of the client unit")
    assert other.explanation["rule"] != "exact"
    promised = {"rule", "probability", "cut", "fit_version", "margin", "blocks", "blocks_unchecked", "penalties"}
    assert promised <= set(other.explanation) and promised <= set(exact.explanation)
    assert {k: exact.explanation[k] for k in promised - {"rule"}} == {
        "probability": None,
        "cut": None,
        "fit_version": None,
        "margin": None,
        "blocks": [],
        "blocks_unchecked": [],
        "penalties": {},
    }
    assert exact.explanation["confidence"] == 1.0


@pytest.mark.parametrize("text", ["_" * 12, "%%%%", "list%cbus", "delete_a_cbu"])
def test_like_wildcards_in_the_text_match_no_phrase_whether_the_catalogue_is_in_memory_or_queried(catalogue, settings, text):
    """'_' and '%' are plain characters of the text: as the in-memory catalogue compares, the tier query compares
    (a catalogue too large to keep in process reads its phrases in the query)."""
    from embeddings.embedders import current_model_name
    from learning.selectors.tiers import tier_rows

    args = {"normalized": text, "vector": None, "model": current_model_name(), "user_id": None, "domain": None}
    args |= {"k_learned": 5, "k_catalogue": 8, "k_blocks": 5, "block_threshold": 0.9}
    in_memory = resolve(text=text)
    assert tier_rows(**args).phrases == []
    settings.RESOLVE_CATALOGUE_CACHE_PHRASES = 0  # too small to keep: the tier query reads the catalogue
    assert tier_rows(**args).phrases == []
    in_query = resolve(text=text)
    assert in_query.outcome == in_memory.outcome
    assert in_query.outcome == "no_match" or text != "_" * 12  # the others are near a phrase by meaning
    # a phrase containing the text, or contained in it, still matches in the query
    args["normalized"] = "list all cbus please"
    assert ("cbu.list", "list all cbus", "substring") in tier_rows(**args).phrases
