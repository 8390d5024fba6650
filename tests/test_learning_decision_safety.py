"""The learned decision under damage and races: a damaged fit or head falls back (never a 500) and never stops a
refit; a reviewer's pin racing a refit is neither lost nor a 500; the live fit decides however many priors follow
it; the explanation shows the values the decision compared."""

import numpy as np
import pytest

from learning.models import DecisionFit, DecisionFitEvent, DecisionHead
from learning.resolution import resolve
from learning.selectors import decision_cache_clear
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_fit_pin, decision_prior_fit, decision_refit
from tests import test_learning_decision_faults as faults
from tests.conftest import make_client
from tests.test_learning_decision import BIG, _labelled

TEXT = "please send an email to my manager"


prior = faults.prior  # the catalogue's prior, live, with its heads (a fixture)


def _live_copy(prior, heads=True, **params):
    """``test_learning_decision_faults._live_copy`` with held-out figures a pin would accept."""
    fit = faults._live_copy(prior, heads=heads, **params)
    DecisionFit.objects.filter(pk=fit.pk).update(held_out={"right": 0.5, "wrong": 0.01, "asked": 0.49})
    fit.refresh_from_db()
    return fit


def _post(text=TEXT, **extra):
    client = make_client(["resolve"], name=f"agent-{np.random.default_rng().integers(1e9)}")
    return client.post("/api/v1/resolve", {"text": text, **extra}, format="json")


# --- corrupt params / heads ---


@pytest.mark.parametrize("damage", [{"intercept": "0.5"}, {"mean": None}])
def test_live_fit_with_numbers_as_text_falls_back_to_prior_not_500(prior, damage):
    if "mean" in damage:
        damage = {"mean": [str(v) for v in prior.params["mean"]]}
    bad = _live_copy(prior, **damage)
    response = _post()
    assert response.status_code == 200, response.content[:300]
    body = response.json()
    assert body["explanation"]["rule"] == "prior" and f"v{bad.version}" in body["degraded_reason"]


def test_head_row_with_damaged_anchors_falls_back_not_500(prior):
    """A stored head whose ``anchors`` JSON is damaged (a list, not {verb: n}) is a corrupt head row."""
    bad = _live_copy(prior)
    DecisionHead.objects.filter(fit=bad).update(anchors=["email.send"])
    decision_cache_clear()
    response = _post()
    assert response.status_code == 200, response.content[:300]
    body = response.json()
    assert body["explanation"]["rule"] == "prior" and f"v{bad.version}" in body["degraded_reason"]


def test_refit_still_fits_when_the_live_fit_is_corrupt(prior, settings):
    """The resolver falls back from a corrupt live fit; the refit (the way out) must not crash on it either."""
    _labelled(300, np.random.default_rng(0), prior)
    bad = _live_copy(prior, mean="junk", cut=0.5)
    r = resolve(text=TEXT)
    assert r.explanation["rule"] == "prior" and f"v{bad.version}" in r.degraded_reason  # resolve copes
    out = decision_refit()
    assert out["shadow"] is not None


def test_explanation_probability_vs_cut_agree_with_outcome(prior):
    """outcome resolved iff explanation.probability >= explanation.cut (and top_cos >= min_top_cos)."""
    first = resolve(text=TEXT)
    p = first.trace["probability"]
    shown = round(p, 4)
    # a cut between the true probability and its value rounded to 4 places
    cut = (p + shown) / 2 if shown != p else p + 1e-9
    live = _live_copy(prior, cut=cut, min_top_cos=-1.0)
    r = resolve(text=TEXT)
    e = r.explanation
    assert e["fit_version"] == live.version
    assert (r.outcome == "resolved") == (e["probability"] >= e["cut"] and e["top_cos"] >= e["min_top_cos"]), (
        r.outcome,
        e["probability"],
        e["cut"],
    )


# --- concurrency (each thread on its own connection) ---


def _eligible_retired_fit(prior):
    """A retired fit from labels a reviewer may pin (enough labels, held-out wrong within the target)."""
    return DecisionFit.objects.create(
        version=DecisionFit.objects.order_by("-version").first().version + 1,
        source="labels",
        status="retired",
        embedding_model=prior.embedding_model,
        params=prior.params,
        n_labels=500,
        held_out={"right": 0.5, "wrong": 0.01, "asked": 0.49},
    )


def _refit_and_pin(*, before_pin, pin_fit, after_pin=lambda: None, refit=decision_refit) -> tuple[dict, list]:
    """A refit (thread "refit") and a reviewer's pin (thread "pin", after ``before_pin``), each on its own
    connection: (results by name, errors)."""
    import threading

    from django.db import connection

    errors, results = [], {}

    def run(name, call, after=lambda: None):
        try:
            results[name] = call()
        except Exception as exc:
            errors.append((name, repr(exc)))
        finally:
            after()
            connection.close()

    def pin():
        before_pin()
        run("pin", lambda: decision_fit_pin(fit=pin_fit()), after_pin)

    threads = [threading.Thread(target=run, args=("refit", refit), name="refit"), threading.Thread(target=pin)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_a_pin_racing_an_automatic_promotion_is_not_lost(monkeypatch):
    """The refit holds the live fit locked while it promotes the shadow; a reviewer's pin of another fit waits on
    that lock and must then switch from the newly promoted fit (not fail on the one-live constraint)."""
    import threading
    import time

    import learning.services.decisions as services

    verb_catalogue_load(entries=BIG)
    prior = decision_prior_fit()
    rng = np.random.default_rng(0)
    _labelled(400, rng, prior)
    shadow = DecisionFit.objects.get(version=decision_refit()["shadow"])
    _labelled(50, rng, prior)  # judged in shadow: the next refit promotes it
    target = _eligible_retired_fit(prior)

    holding = threading.Event()
    real_verdict = services.promotion_verdict

    def slow_verdict(*, fit):  # called with the live fit locked, just before the switch
        holding.set()
        time.sleep(2.0)
        return real_verdict(fit=fit)

    monkeypatch.setattr(services, "promotion_verdict", slow_verdict)
    # the pin reaches the live fit's lock while the refit holds it
    results, errors = _refit_and_pin(before_pin=lambda: holding.wait(30) and time.sleep(0.3), pin_fit=lambda: target)
    assert results.get("refit", {}).get("promoted") == shadow.version, results
    assert errors == [], errors
    live = DecisionFit.objects.get(status="live")
    assert live.pk == target.pk and live.pinned
    assert DecisionFitEvent.objects.filter(fit=target, previous_version=shadow.version).exists()


@pytest.mark.django_db(transaction=True)
def test_a_refit_never_retires_the_shadow_a_reviewer_just_pinned_live(monkeypatch):
    """A reviewer pins the shadow fit live while a refit, which read it as the shadow, trains the new fit's heads
    (before it retires the old shadow for the new one): the pin stands, and the new fit is the only shadow."""
    import threading

    import learning.services.decisions as services

    verb_catalogue_load(entries=BIG)
    prior = decision_prior_fit()
    _labelled(400, np.random.default_rng(0), prior)
    shadow = DecisionFit.objects.get(version=decision_refit()["shadow"])  # not judged in shadow: not promoted next

    training, pinned = threading.Event(), threading.Event()
    real_train = services._heads_train

    def heads_train(*args, **kwargs):
        if threading.current_thread().name == "refit":
            training.set()
            assert pinned.wait(60), "the pin never finished"
        return real_train(*args, **kwargs)

    monkeypatch.setattr(services, "_heads_train", heads_train)
    results, errors = _refit_and_pin(
        before_pin=lambda: training.wait(60),
        pin_fit=lambda: DecisionFit.objects.get(pk=shadow.pk),
        after_pin=pinned.set,
        refit=lambda: decision_refit(force=True),  # an operator's forced refit: no new label needed
    )
    assert errors == [], errors
    assert training.is_set() and pinned.is_set()  # the pin ran while the refit was fitting
    assert results["pin"].status == "live" and results["pin"].pinned
    assert results["refit"]["shadow"] is not None
    shadow.refresh_from_db()
    lives = list(DecisionFit.objects.filter(status="live").values_list("version", flat=True))
    assert (shadow.status, lives) == ("live", [shadow.version]), (shadow.status, shadow.pinned, lives)
    shadows = list(DecisionFit.objects.filter(status="shadow").values_list("version", flat=True))
    assert shadows == [results["refit"]["shadow"]]


def test_the_live_fit_still_decides_after_many_newer_priors(prior):
    """Each change of the catalogue or of the global phrases refits the prior (daily refit); with a fit from labels
    live, each new prior is stored retired. After 50 of them the live fit must still decide."""
    live = _live_copy(prior, cut=0.5)
    top = live.version
    for i in range(50):
        DecisionFit.objects.create(
            version=top + 1 + i,
            source="prior",
            status="retired",
            embedding_model=prior.embedding_model,
            params=prior.params,
            n_labels=prior.n_labels,
            held_out=prior.held_out,
        )
    newest = DecisionFit.objects.order_by("-version").first()
    for h in DecisionHead.objects.filter(fit=prior):  # the newest prior has its heads, as a real one would
        DecisionHead.objects.create(fit=newest, user_id=h.user_id, weights=h.weights, anchors=h.anchors)
    decision_cache_clear()
    assert DecisionFit.objects.get(status="live").pk == live.pk
    r = resolve(text=TEXT)
    assert (r.explanation["rule"], r.explanation["fit_version"], r.degraded_reason) == ("learned", live.version, "")


def test_fixed_rule_margin_equal_to_the_required_margin_resolves():
    """The fixed rule resolves when the top score leads the next by at least the margin: 0.85 over 0.80 is 0.05 as the
    explanation shows it, whatever the float subtraction gives."""
    from learning.resolution import Candidate, _decide

    p = {"resolve_threshold": 0.80, "margin": 0.05}
    ranked = [Candidate("a.b", 0.85, "catalogue_semantic", "x"), Candidate("c.d", 0.80, "catalogue_semantic", "y")]
    shown_margin = round(ranked[0].score - ranked[1].score, 4)  # what explanation["margin"] shows
    assert shown_margin >= p["margin"]
    assert _decide(ranked, p) == ("resolved", "a.b")
