"""The verbs' names as a decision feature: the words of a name, the margin of a query's cosine to the top verb's
name over every other verb's, the name vectors stored with each head, and fits and records from before the feature
existed still read."""

import numpy as np
import pytest

from common.text import normalize_phrase
from embeddings.embedders import EmbeddingError, get_embedder
from learning import decision
from learning.catalogue import VerbEntry
from learning.models import DecisionFit, DecisionHead, Verb
from learning.resolution import resolve
from learning.selectors import decision_cache_clear, decision_head
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_prior_fit, decision_refit
from tests.conftest import make_client
from tests.test_learning_decision import BIG, URL, _synthetic, labelled_records


@pytest.fixture
def big(db):
    verb_catalogue_load(entries=BIG)


def test_the_words_of_a_name_leave_out_the_shared_domain_and_add_a_display_name_that_says_more():
    assert decision.verb_words("banking.exchange_rate", "banking") == "exchange rate"
    assert decision.verb_words("cbu.create", "cbu") == "create"
    assert decision.verb_words("cbu.create", "clients") == "cbu create"
    assert decision.verb_words("createInvoice", "billing") == "create invoice"
    assert decision.verb_words("mail-send", "") == "mail send"
    assert decision.verb_words("home", "home") == "home"  # a name of one part keeps it
    assert decision.verb_words("email.send", "email", "Send an e-mail") == "send, send an e-mail"
    assert decision.verb_words("email.send", "email", "  SEND ") == "send"  # the same words once


def test_the_name_margin_is_the_top_verbs_name_over_the_best_other_and_zero_without_names():
    C = np.array([[0.9, 0.5, 0.7], [0.2, 0.6, np.nan], [np.nan, 0.4, 0.3]])
    np.testing.assert_allclose(decision.name_margins(C, [0, 0, 1]), [0.2, -0.4, 0.1])
    # a verb scored as if it did not exist leaves the others: the next best name counts
    np.testing.assert_allclose(decision.name_margins(C, [0, 1, 1], exclude=[2, 2, 2]), [0.4, 0.4, 0.0])
    # the top verb without a name, or no other name: 0, never NaN
    np.testing.assert_allclose(decision.name_margins(C, [1, 2, 0]), [-0.4, 0.0, 0.0])
    assert decision.name_margins([[0.5, np.nan]], [0]).tolist() == [0.0]
    assert decision.name_margins(np.zeros((2, 0)), [0, 0]).tolist() == [0.0, 0.0]


def test_a_head_keeps_its_name_vectors_and_a_head_without_them_still_loads():
    head = {"W": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32), "classes": np.array([0, 1])}
    names = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [np.nan] * 4], dtype=np.float32)
    back, verbs = decision.head_loads(decision.head_dumps(head, ["a.x", "b.y"], (["a.x", "b.y", "c.z"], names)))
    assert verbs == ["a.x", "b.y"] and back["name_verbs"] == ["a.x", "b.y", "c.z"]
    np.testing.assert_array_equal(back["names"], names)
    plain, _ = decision.head_loads(decision.head_dumps(head, ["a.x", "b.y"]))
    assert plain["names"] is None and plain["name_verbs"] is None
    with pytest.raises(ValueError, match="name vectors"):
        decision.head_loads(decision.head_dumps(head, ["a.x", "b.y"], (["a.x"], names)))


def test_a_fit_on_the_features_of_older_records_reads_only_those_and_any_other_list_is_refused():
    F, y = _synthetic()
    old = decision.fit_decision(F[:, : decision.BASE_FEATURES], y, max_wrong_rate=0.03, min_labels=200)
    assert old["features"] == list(decision.FEATURES[: decision.BASE_FEATURES]) and len(old["coef"]) == decision.BASE_FEATURES
    decision.check_params(old)
    # a resolver with more features decides with the ones the fit has: the same answers
    np.testing.assert_array_equal(decision.decide(old, F), decision.decide(old, F[:, : decision.BASE_FEATURES]))
    full = decision.fit_decision(F, y, max_wrong_rate=0.03, min_labels=200)
    assert full["features"] == list(decision.FEATURES) and full["coef"][decision.FEATURES.index("name_margin")] >= 0.0  # monotone
    for features in (list(decision.FEATURES[:5]), list(reversed(decision.FEATURES)), [*decision.FEATURES, "extra"]):
        with pytest.raises(ValueError, match="features"):
            decision.check_params({**full, "features": features})
    with pytest.raises(ValueError, match="columns"):
        decision.fit_decision(F[:, :5], y, max_wrong_rate=0.03, min_labels=200)


def test_the_prior_stores_the_names_of_every_verb_and_the_resolver_explains_the_margin(big):
    verb_catalogue_load(entries=[VerbEntry("weather.alert", "weather", "", "", [])])  # a verb nobody taught yet
    fit = decision_prior_fit()
    head = decision_head(fit.version, None)[0]
    names = dict(zip(head["name_verbs"], head["names"], strict=True))
    assert set(names) == set(Verb.objects.values_list("name", flat=True))  # also the verb without phrases
    np.testing.assert_allclose(names["weather.alert"], get_embedder().embed("alert"), atol=1e-6)
    text = "send an email to my manager"
    r = resolve(text=text)
    assert r.candidates[0].verb == "email.send"
    cos = dict(zip(head["name_verbs"], head["names"] @ get_embedder().embed(normalize_phrase(text)), strict=True))
    margin = r.explanation["name_margin"]
    assert margin == pytest.approx(cos["email.send"] - max(c for v, c in cos.items() if v != "email.send"), abs=1e-4)
    assert margin > 0.0 and margin == round(r.trace["features"][decision.FEATURES.index("name_margin")], 4)
    # the open-set row scores the runner-up as if the top verb did not exist: its name is not among the others
    runner = r.trace["top_verbs"][1]
    others = max(c for v, c in cos.items() if v not in (runner, "email.send"))
    at = decision.FEATURES.index("name_margin")
    assert r.trace["features_open"][at] == pytest.approx(cos[runner] - others, abs=1e-4)


def test_a_prior_and_head_from_before_the_names_still_decide_undegraded(big):
    fit = decision_prior_fit()
    params = dict(fit.params)
    for key in ("mean", "scale", "coef"):
        params[key] = params[key][: decision.BASE_FEATURES]
    params["features"] = list(decision.FEATURES[: decision.BASE_FEATURES])
    del params["names_key"]
    DecisionFit.objects.filter(pk=fit.pk).update(params=params)
    stored = DecisionHead.objects.get(fit=fit, user_id=None)
    head, verbs = decision.head_loads(stored.weights)
    stored.weights = decision.head_dumps(head, verbs)  # no names, as heads were stored before
    stored.save(update_fields=["weights"])
    decision_cache_clear()
    r = resolve(text="send an email to my manager")
    assert r.explanation["rule"] == "prior" and not r.degraded and r.explanation["name_margin"] is None
    assert len(r.trace["features"]) == decision.BASE_FEATURES
    # the refit sees a prior without names: stale, fitted again with them
    assert decision_refit()["prior"] is not None


def test_a_personal_head_from_before_the_names_compares_with_its_fits_names(big):
    fit = decision_prior_fit()
    stored = DecisionHead.objects.get(fit=fit, user_id=None)
    head, verbs = decision.head_loads(stored.weights)
    DecisionHead.objects.create(
        fit=fit, user_id="alice", weights=decision.head_dumps(head, verbs), anchors=stored.anchors, inputs_digest="old"
    )
    decision_cache_clear()
    assert decision_head(fit.version, "alice")[3] == "alice"
    mine, theirs = resolve(text="book a call with anna", user_id="alice"), resolve(text="book a call with anna")
    assert mine.explanation["name_margin"] is not None
    assert mine.explanation["name_margin"] == theirs.explanation["name_margin"]


def test_name_vectors_of_another_width_are_refused_and_the_next_fit_decides(big):
    prior = decision_prior_fit()
    live = DecisionFit.objects.create(
        version=prior.version + 1,
        source="labels",
        status="retired",
        embedding_model=prior.embedding_model,
        params=prior.params,
        n_labels=500,
    )
    stored = DecisionHead.objects.get(fit=prior, user_id=None)
    head, verbs = decision.head_loads(stored.weights)
    bad = np.ones((len(head["name_verbs"]), 7), dtype=np.float32)
    weights = decision.head_dumps(head, verbs, (head["name_verbs"], bad))
    with pytest.raises(ValueError, match="name vectors"):
        decision.head_loads(weights)
    DecisionHead.objects.create(fit=live, user_id=None, weights=weights, anchors=stored.anchors, inputs_digest="x")
    DecisionFit.objects.filter(pk=prior.pk).update(status="retired")
    DecisionFit.objects.filter(pk=live.pk).update(status="live")
    decision_cache_clear()
    response = make_client(["resolve"]).post(URL, {"text": "what is the weather like"}, format="json")
    body = response.json()
    assert response.status_code == 200 and "unusable" in body["degraded_reason"]
    assert body["explanation"]["rule"] == "prior"  # the prior, which is sound, decides


def test_a_rename_whose_refit_was_lost_is_caught_by_the_daily_refit(big):
    first = decision_prior_fit()
    Verb.objects.filter(name="weather.get").update(display_name="Forecast")  # no refit sent (a broker outage)
    refitted = decision_refit()["prior"]
    assert refitted is not None and refitted > first.version
    assert decision_refit()["prior"] is None  # current again


def test_a_renamed_verb_trains_the_heads_again_with_its_new_name(big):
    first = decision_prior_fit()
    before = decision_head(first.version, None)[0]
    Verb.objects.filter(name="weather.get").update(display_name="Forecast")
    decision_cache_clear()
    second = decision_prior_fit()
    after = decision_head(second.version, None)[0]
    i = after["name_verbs"].index("weather.get")
    assert not np.allclose(before["names"][i], after["names"][i])
    np.testing.assert_allclose(after["names"][i], get_embedder().embed(normalize_phrase("get, forecast")), atol=1e-6)


def test_without_the_embedder_a_fit_goes_on_without_names_and_the_feature_is_zero(big, monkeypatch):
    def down(self, texts, **kwargs):
        raise EmbeddingError("embedding server down")

    embedder = get_embedder()
    monkeypatch.setattr(type(embedder), "embed_batch", down)
    fit = decision_prior_fit()
    assert decision_refit()["prior"] is None  # while the embedder stays down, no refit fits the prior again
    monkeypatch.undo()
    assert fit is not None and decision_head(fit.version, None)[0]["names"] is None
    assert fit.params["features"] == list(decision.FEATURES[: decision.BASE_FEATURES])  # fitted without the feature
    r = resolve(text="send an email to my manager")
    # no margin to compare: the explanation says so, and the record keeps the features before it
    assert r.explanation["name_margin"] is None and not r.degraded
    assert len(r.trace["features"]) == decision.BASE_FEATURES
    # the embedder is back: the prior without names is stale, and the next refit fits it with them
    again = DecisionFit.objects.get(version=decision_refit()["prior"])
    assert again.params["features"] == list(decision.FEATURES) and decision_head(again.version, None)[0]["names"] is not None


def test_labels_recorded_before_the_name_feature_train_a_fit_without_it_until_enough_carry_it(big, settings):
    settings.RESOLVE_PROMOTE_MIN_LABELS = 200
    prior = decision_prior_fit()
    F, y = _synthetic(600, seed=3)
    labelled_records(F[:300, : decision.BASE_FEATURES].tolist(), y[:300], prior)  # recorded by a resolver without names
    labelled_records(F[300:400].tolist(), y[300:400], prior)
    out = decision_refit()
    first = DecisionFit.objects.get(version=out["shadow"])
    assert first.params["features"] == list(decision.FEATURES[: decision.BASE_FEATURES]) and first.n_labels == 400
    decision.check_params(first.params)
    forced = DecisionFit.objects.get(version=decision_refit(force=True)["shadow"])  # forced: still every label
    assert forced.n_labels == 400 and len(forced.params["features"]) == decision.BASE_FEATURES
    labelled_records(F[400:].tolist(), y[400:], prior)  # now 300 rows carry every feature: the older ones are left out
    second = DecisionFit.objects.get(version=decision_refit(force=True)["shadow"])
    assert second.params["features"] == list(decision.FEATURES) and second.n_labels == 300
    # the resolver decides with either: an older fit reads the features it was fitted on
    decision_cache_clear()
    for fit in (first, second):
        DecisionFit.objects.filter(status="live").update(status="retired")
        DecisionFit.objects.filter(pk=fit.pk).update(status="live")
        decision_cache_clear()
        r = resolve(text="send an email to my manager")
        assert r.explanation["fit_version"] == fit.version and not r.degraded


def test_a_new_or_renamed_verb_refits_the_prior_and_an_edit_that_keeps_the_words_does_not(db, django_capture_on_commit_callbacks):
    from learning.services.catalogue import verb_edit

    def priors():
        return DecisionFit.objects.filter(source="prior").count()

    with django_capture_on_commit_callbacks(execute=True):
        verb_catalogue_load(entries=BIG)
    assert priors() == 1
    with django_capture_on_commit_callbacks(execute=True):
        verb_catalogue_load(entries=[VerbEntry("weather.alert", "weather", "", "", [])])  # a verb without phrases
    assert priors() == 2
    verb = Verb.objects.get(name="weather.get")
    with django_capture_on_commit_callbacks(execute=True):
        verb.description = "Today's forecast."  # not part of the name's words
        verb_edit(verb=verb, fields=["description"])
        verb_catalogue_load(entries=BIG)  # the same names again
    assert priors() == 2
    with django_capture_on_commit_callbacks(execute=True):
        verb.display_name = "Forecast"
        verb_edit(verb=verb, fields=["display_name"])
    assert priors() == 3
    with django_capture_on_commit_callbacks(execute=True):
        verb_catalogue_load(entries=[VerbEntry("weather.get", "weather", "Weather now", None, [])])
    assert priors() == 4
