"""A damaged or foreign fit never decides and never answers 500: bad params or heads fall back with the reason, a
fit of another embedding model is never used for this model's vectors, damaged labels are left out of a refit, and
a reviewer cannot pin a fit that automatic promotion would refuse."""

import io

import numpy as np
import pytest

from embeddings.embedders import get_embedder, set_embedder
from embeddings.services import embeddings_backfill
from learning import decision
from learning.catalogue import VerbEntry
from learning.models import DecisionFit, DecisionHead, ResolutionRecord, VerbPhrase
from learning.resolution import resolve
from learning.selectors import decision_cache_clear
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_fit_pin, decision_fit_retire_live, decision_prior_fit, decision_refit
from tests.conftest import make_client
from tests.test_learning_decision import BIG, _labelled

pytestmark = pytest.mark.django_db
TEXT = "please send an email to my manager"
LOCAL = "all-MiniLM-L6-v2-onnx-int8"


@pytest.fixture(autouse=True)
def _fresh():
    decision_cache_clear()
    yield
    set_embedder(None)
    decision_cache_clear()


@pytest.fixture
def prior(db):
    verb_catalogue_load(entries=BIG)
    fit = decision_prior_fit()
    assert fit is not None and fit.status == "live" and fit.params["heads"] >= 1
    return fit


def _live_copy(prior, heads=True, shadow=False, **params):
    """A learned fit, live (or in ``shadow``): the prior's params with some keys replaced (and its heads, unless
    told)."""
    bad = DecisionFit.objects.create(
        version=DecisionFit.objects.order_by("-version").first().version + 1,
        source="labels",
        status="candidate",
        embedding_model=prior.embedding_model,
        params={**prior.params, **params},
        n_labels=500,
    )
    if heads:
        for h in DecisionHead.objects.filter(fit=prior):
            DecisionHead.objects.create(fit=bad, user_id=h.user_id, weights=h.weights, anchors=h.anchors)
    if shadow:
        DecisionFit.objects.filter(pk=bad.pk).update(status="shadow")
    else:
        DecisionFit.objects.filter(status="live").update(status="retired")
        DecisionFit.objects.filter(pk=bad.pk).update(status="live")
    decision_cache_clear()
    return bad


def _answer():
    response = make_client(["resolve"]).post("/api/v1/resolve", {"text": TEXT}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize(
    "damage", [{"cut": "0.5"}, {"cut": [0.5]}, {"cut": float("nan")}, {"min_top_cos": None}, {"min_top_cos": "x"}]
)
def test_a_damaged_cut_or_support_floor_falls_back_to_the_prior_with_the_reason(prior, damage):
    if damage.get("cut") != damage.get("cut"):  # NaN cannot be stored in JSON: check the params directly
        with pytest.raises(ValueError, match="cut"):
            decision.check_params({**prior.params, **damage})
        return
    bad = _live_copy(prior, **damage)
    body = _answer()
    assert body["explanation"]["rule"] == "prior" and f"v{bad.version} unusable" in body["degraded_reason"]


def test_a_head_with_weights_that_are_not_numbers_falls_back_never_500(prior):
    head, verbs = decision.head_loads(DecisionHead.objects.filter(fit=prior, user_id=None).get().weights)
    buffer = io.BytesIO()
    W = head["W"].copy()
    W[0, 0] = np.nan
    np.savez(buffer, W=W, b=head["b"], classes=head["classes"], verbs=np.array(verbs))
    with pytest.raises(ValueError, match="finite"):
        decision.head_loads(buffer.getvalue())
    DecisionHead.objects.filter(fit=prior).update(weights=buffer.getvalue())
    decision_cache_clear()
    body = _answer()
    assert body["explanation"]["rule"] == "fixed" and "unusable" in body["degraded_reason"]


def test_a_live_fit_without_params_or_without_its_head_is_skipped_with_the_reason(prior):
    bad = _live_copy(prior)
    DecisionFit.objects.filter(pk=bad.pk).update(params=None)
    decision_cache_clear()
    r = resolve(text=TEXT)
    assert r.explanation["rule"] == "prior" and r.degraded_reason == f"decision fit v{bad.version} has no params; fell back"
    other = _live_copy(prior, heads=False)
    r = resolve(text=TEXT)
    assert r.explanation["rule"] == "prior" and r.degraded_reason == f"decision head v{other.version} missing; fell back"


class ModelB:
    """Another embedding model: the local model's vectors with their dimensions permuted (another space)."""

    model_name = "model-b"
    dimension = 384
    in_process = True

    def __init__(self, inner):
        self.inner, self.perm = inner, np.random.default_rng(7).permutation(384)

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        return [v[self.perm] for v in self.inner.embed_batch(texts)]


def test_a_live_head_that_loads_but_cannot_score_the_query_gives_way_to_the_prior(prior):
    head, verbs = decision.head_loads(DecisionHead.objects.get(fit=prior, user_id=None).weights)
    short = {**head, "W": head["W"][:100]}  # readable, finite, but of another width than the query's vectors
    bad = _live_copy(prior, heads=False)
    DecisionHead.objects.create(fit=bad, user_id=None, weights=decision.head_dumps(short, verbs), anchors={}, inputs_digest="x")
    decision_cache_clear()
    body = _answer()
    assert body["explanation"]["rule"] == "prior" and body["explanation"]["fit_version"] == "prior"
    assert f"decision head v{bad.version} unusable" in body["degraded_reason"]


def test_a_verb_taught_since_the_live_fit_is_decided_by_the_prior_once_the_prior_knows_it(prior, monkeypatch):
    live = _live_copy(prior)  # a fit from labels, its heads trained before the new verb existed
    invoice = VerbEntry(
        "invoice.pay", "invoice", "Pay an invoice", "", ["pay this invoice", "settle the invoice", "pay the supplier invoice"]
    )
    verb_catalogue_load(entries=[*BIG, invoice])
    decision_cache_clear()
    text = "please pay the invoice from the supplier"
    # until the prior's refit has run, no fit knows the verb: the live fit decides, with no head evidence for it
    before = resolve(text=text)
    assert before.candidates[0].verb == "invoice.pay"
    assert before.explanation["rule"] == "learned" and before.explanation["fit_version"] == live.version
    assert "fit_passed_over" not in before.explanation and not before.degraded_reason
    refitted = decision_prior_fit()  # what the catalogue load sends; a fit from labels is live, so it waits retired
    assert refitted.status == "retired" and DecisionFit.objects.get(status="live") == live
    decision_cache_clear()
    from learning import resolution

    asked = []
    knows = resolution._head_knows
    monkeypatch.setattr(resolution, "_head_knows", lambda head, verb: asked.append(verb) or knows(head, verb))
    after = resolve(text=text)
    assert asked == ["invoice.pay", "invoice.pay"]  # the prior is asked about the verb the live fit did not know
    assert after.explanation["rule"] == "prior" and after.explanation["version"] == refitted.version
    assert after.explanation["fit_passed_over"] == {"fit_version": live.version, "verb": "invoice.pay"}
    assert not after.degraded_reason
    assert after.explanation["probability"] > max(0.5, before.explanation["probability"] + 0.3)
    # a text of a verb the live fit was trained on is still the live fit's
    old = resolve(text=TEXT)
    assert old.explanation["rule"] == "learned" and old.explanation["fit_version"] == live.version
    assert "fit_passed_over" not in old.explanation
    # a prior that cannot be used (its head lost) leaves the query to the live fit, which is not degraded by it
    DecisionHead.objects.filter(fit=refitted).delete()
    decision_cache_clear()
    kept = resolve(text=text)
    assert kept.explanation["rule"] == "learned" and kept.explanation["fit_version"] == live.version
    assert not kept.degraded_reason and "fit_passed_over" not in kept.explanation


def test_the_shadow_fit_asks_where_the_live_rules_penalty_guard_would(prior, monkeypatch):
    from types import SimpleNamespace

    from learning import resolution

    shadow = DecisionFit.objects.create(
        version=prior.version + 1,
        source="labels",
        status="shadow",
        embedding_model=prior.embedding_model,
        params={**prior.params, "cut": 0.0, "min_top_cos": -1.0},  # it would resolve anything
        n_labels=500,
    )
    for h in DecisionHead.objects.filter(fit=prior):
        DecisionHead.objects.create(fit=shadow, user_id=h.user_id, weights=h.weights, anchors=h.anchors)
    decision_cache_clear()
    assert resolve(text=TEXT).trace["shadow_outcome"] == "resolved"
    monkeypatch.setattr(resolution, "_penalty_decided", lambda view, top, before, endorsed: True)
    assert resolve(text=TEXT).trace["shadow_outcome"] == "ambiguous"
    monkeypatch.undo()
    # the guard: penalties may put first only a verb the user endorsed, or the verb first without them
    view = SimpleNamespace(verbs=["a.x", "b.y", ""])
    before = {"a.x": 0.9, "b.y": 0.8}
    assert not resolution._penalty_decided(view, 1, before, None)  # no penalty applied
    assert resolution._penalty_decided(view, 1, before, set())  # b.y leads only after the penalties
    assert not resolution._penalty_decided(view, 1, before, {"b.y"})  # the user chose b.y for these words
    assert not resolution._penalty_decided(view, 0, before, set())  # a.x led before them too


def test_after_a_change_of_embedding_model_only_that_models_fits_decide(prior):
    decision_fit_pin(fit=prior)  # a reviewer had pinned the prior before the change
    set_embedder(ModelB(get_embedder().inner))
    assert embeddings_backfill()["failed"] == 0
    assert not VerbPhrase.objects.exclude(embedding_model="model-b").exists()
    decision_cache_clear()
    r = resolve(text=TEXT)  # no fit of model-b yet: the fixed rule, and why
    assert r.explanation["rule"] == "fixed" and f"v{prior.version} is for embedding model {LOCAL}" in r.degraded_reason
    with pytest.raises(Exception, match="embedding model"):
        decision_fit_pin(fit=prior)
    out = decision_refit()  # the refit fits model-b's prior and puts it live, though the old one was pinned
    new = DecisionFit.objects.get(version=out["prior"])
    assert (new.embedding_model, new.status) == ("model-b", "live")
    decision_cache_clear()
    r = resolve(text=TEXT)
    assert r.explanation["rule"] == "prior" and r.explanation["version"] == new.version and not r.degraded_reason
    set_embedder(None)  # back to the local model: the roll back picks the local model's prior
    decision_cache_clear()
    assert decision_fit_retire_live().embedding_model == LOCAL


def test_damaged_labels_are_left_out_of_a_refit_and_two_labels_fit_nothing(prior, settings):
    _labelled(400, np.random.default_rng(0), prior)
    first, second = ResolutionRecord.objects.order_by("id")[:2]
    ResolutionRecord.objects.filter(pk=first.pk).update(features=[None] * len(decision.FEATURES))
    ResolutionRecord.objects.filter(pk=second.pk).update(features=["0.5x", *second.features[1:]])
    out = decision_refit()
    assert DecisionFit.objects.get(version=out["shadow"]).n_labels == 398
    F = np.zeros((2, len(decision.FEATURES)))
    assert decision.fit_decision(F, [1, 0], max_wrong_rate=0.03, min_labels=1) is None
    F = np.random.default_rng(1).normal(size=(41, len(decision.FEATURES)))
    F[0, 0] = np.inf  # left out, not fatal
    fit = decision.fit_decision(F, [1] * 21 + [0] * 20, max_wrong_rate=0.03, min_labels=1)
    assert fit is not None and fit["n_labels"] == 40


def test_a_fit_from_too_few_labels_cannot_be_pinned_live(prior, settings):
    _labelled(150, np.random.default_rng(0), prior)
    out = decision_refit(force=True)
    forced = DecisionFit.objects.get(version=out["shadow"])
    with pytest.raises(Exception, match="150 labels"):
        decision_fit_pin(fit=forced)
    assert DecisionFit.objects.get(status="live").pk == prior.pk
    # enough labels, but its held-out figures lost or damaged: nothing says it keeps the target
    for held_out in ({}, {"wrong": None}, {"wrong": "0.01"}, []):
        DecisionFit.objects.filter(pk=forced.pk).update(n_labels=500, held_out=held_out)
        forced.refresh_from_db()
        with pytest.raises(Exception, match="no held-out wrong rate"):
            decision_fit_pin(fit=forced)
    assert DecisionFit.objects.get(status="live").pk == prior.pk


@pytest.mark.parametrize("where", ["learned", "catalogue", "block"])
def test_a_stored_vector_with_no_direction_compares_with_nothing_and_never_fails_a_resolve(prior, settings, where):
    """A zero vector stored before vectors were checked: its cosine is not a number. A phrase with one matches
    nothing; a block with one blocks its verb outright, as a block that cannot be compared does."""
    from learning.models import LearnedPhrase, PhraseBlock, Verb
    from learning.services.blocks import phrase_block_add
    from learning.services.phrases import learned_phrase_upsert

    settings.RESOLVE_CATALOGUE_CACHE_PHRASES = 0  # the catalogue's tiers in SQL too
    email = Verb.objects.get(name="email.send")
    if where == "learned":
        row = learned_phrase_upsert(phrase="mail my boss now", verb=email, user_id="alice")
        LearnedPhrase.objects.filter(pk=row.pk).update(embedding=[0.0] * 384)
    elif where == "catalogue":
        VerbPhrase.objects.filter(verb=email).update(embedding=[0.0] * 384)
    else:
        block = phrase_block_add(phrase="send the payroll file", verb_name="email.send")[0]
        PhraseBlock.objects.filter(pk=block.pk).update(embedding=[0.0] * 384)
    response = make_client(["resolve"]).post("/api/v1/resolve", {"text": TEXT, "user_id": "alice"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    if where == "block":
        assert body["explanation"]["blocks_unchecked"] == ["email.send"] and body["verb"] != "email.send"
    else:
        assert all(c["matched_phrase"] != "mail my boss now" for c in body["candidates"])


def test_vectors_without_direction_stored_before_are_cleared_so_every_block_still_blocks(prior):
    """Beyond the nearest blocks the resolver reads, a zero-vector block would go unseen: the migration clears such
    vectors, and a block without a vector blocks its verb outright until the backfill embeds it again."""
    import importlib
    from types import SimpleNamespace

    from django.apps import apps as django_apps
    from django.db import connection

    from learning.models import PhraseBlock
    from learning.services.blocks import phrase_block_add

    for i in range(21):
        phrase_block_add(phrase=f"archive the ledger of region {i}", verb_name="meeting.book", user_id="alice")
    block = phrase_block_add(phrase="send the payroll file", verb_name="email.send")[0]
    PhraseBlock.objects.filter(pk=block.pk).update(embedding=[0.0] * 384)
    migration = importlib.import_module("embeddings.migrations.0002_vectors_without_direction_cleared")
    migration.vectors_without_direction_cleared(django_apps, SimpleNamespace(connection=connection))
    cleared = PhraseBlock.objects.get(pk=block.pk)
    assert cleared.embedding is None and cleared.embedding_model == ""
    assert PhraseBlock.objects.exclude(pk=block.pk).filter(embedding__isnull=True).count() == 0
    r = resolve(text=TEXT, user_id="alice")
    assert "email.send" in r.explanation["blocks_unchecked"] and r.verb != "email.send"
