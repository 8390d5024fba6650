"""A fit answers for the situations its rows hold. A fit from labels whose labels held a yes/no fact of the query
(``decision.SITUATIONS``) too rarely gives way to the catalogue prior when the prior's rows hold it: a newcomer's
verbs with only their catalogue phrases (``verb_is_new``), when every label came from users who taught theirs, are
decided by the prior, fitted on exactly that; neither holding it, or a fit stored before fits recorded them, leaves
the live fit deciding."""

import numpy as np
import pytest

from learning import decision
from learning.models import DecisionFit, Verb
from learning.resolution import resolve
from learning.selectors import decision_cache_clear
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_prior_fit, decision_refit
from learning.services.phrases import learned_phrase_upsert
from tests.test_learning_decision import BIG, _synthetic
from tests.test_learning_decision_faults import TEXT, _live_copy

pytestmark = pytest.mark.django_db
NEW = decision.FEATURES.index("verb_is_new")
OWN = decision.FEATURES.index("top_is_own")
TAUGHT = decision.FEATURES.index("user_has_taught")


@pytest.fixture(autouse=True)
def _fresh():
    decision_cache_clear()
    yield
    decision_cache_clear()


@pytest.fixture
def prior(db):
    verb_catalogue_load(entries=BIG)
    fit = decision_prior_fit()
    assert fit is not None and fit.status == "live"
    return fit


def test_a_fit_counts_each_situation_of_its_labelled_rows_not_its_open_set_rows():
    F, y = _synthetic()
    F[:, decision.FEATURES.index("head_agrees")] = 1.0
    F[:, NEW] = 0.0
    F[:40, NEW] = 1.0
    F[:, OWN] = (np.arange(len(y)) % 2).astype(float)
    F_open = F[:300].copy()
    F_open[:, NEW] = 1.0
    fit = decision.fit_decision(F, y, max_wrong_rate=0.03, min_labels=200, F_open=F_open, max_open_rate=0.5)
    assert fit["situations"]["verb_is_new"] == [len(y) - 40, 40]
    assert fit["situations"]["head_agrees"] == [0, len(y)]
    assert fit["situations"]["top_is_own"] == [len(y) // 2, len(y) // 2]
    assert set(fit["situations"]) == set(decision.SITUATIONS)
    row = F[100].copy()  # head agrees, verb not new: all held
    assert decision.situation_outside(fit, row) is None
    row[decision.FEATURES.index("head_agrees")] = 0.0
    assert decision.situation_outside(fit, row) == {"feature": "head_agrees", "value": 0, "rows": 0}
    few = decision.fit_decision(F[:200], y[:200], max_wrong_rate=0.03, min_labels=100)  # 40 rows of a new verb
    assert decision.situation_outside(few, F[0]) is None and few["situations"]["verb_is_new"][1] == 40
    fewer = {**few, "situations": {**few["situations"], "verb_is_new": [160, decision.SITUATION_MIN_ROWS - 1]}}
    assert decision.situation_outside(fewer, F[0]) == {
        "feature": "verb_is_new",
        "value": 1,
        "rows": decision.SITUATION_MIN_ROWS - 1,
    }
    assert decision.situation_outside({k: v for k, v in fit.items() if k != "situations"}, row) is None


def test_a_query_the_live_fits_labels_never_held_is_decided_by_the_prior_whose_rows_do(prior):
    held = prior.params["situations"]
    assert held["verb_is_new"][1] >= decision.SITUATION_MIN_ROWS  # the catalogue's verbs have five phrases each
    # labels from users who taught every verb many phrases: no label had a verb with only its catalogue phrases
    never_new = {**held, "verb_is_new": [5000, 0]}
    live = _live_copy(prior, situations=never_new)
    r = resolve(text=TEXT, user_id="newcomer")
    assert r.explanation["rule"] == "prior" and r.explanation["version"] == prior.version
    assert r.explanation["fit_outside_labels"] == {
        "fit_version": live.version,
        "feature": "verb_is_new",
        "value": 1,
        "rows": 0,
    }
    assert not r.degraded_reason
    assert r.trace["fit_version"] == prior.version  # the record says which fit decided


def test_a_newcomer_is_decided_by_the_prior_when_every_label_came_from_users_who_had_taught(prior):
    """Labels from users with phrases of their own say how their answers go: a verb they had not taught still beat
    what they had. A newcomer's query is not that situation; the prior, fitted on the catalogue alone, is."""
    never, ever = prior.params["situations"]["user_has_taught"]
    assert never >= decision.SITUATION_MIN_ROWS and ever == 0  # the catalogue's examples are no user's teaching
    taught_only = {**prior.params["situations"], "user_has_taught": [0, 5000]}
    live = _live_copy(prior, situations=taught_only)
    r = resolve(text=TEXT, user_id="newcomer")
    assert r.explanation["rule"] == "prior" and r.explanation["version"] == prior.version
    assert r.explanation["fit_outside_labels"] == {
        "fit_version": live.version,
        "feature": "user_has_taught",
        "value": 0,
        "rows": 0,
    }
    assert r.trace["features"][TAUGHT] == 0.0
    # a user who taught a phrase of their own (of another verb) is in the labels' situation: the live fit decides
    learned_phrase_upsert(phrase="set up another business unit", verb=Verb.objects.get(name="cbu.create"), user_id="teacher")
    r = resolve(text=TEXT, user_id="teacher")
    assert r.explanation["rule"] == "learned" and r.explanation["fit_version"] == live.version
    assert "fit_outside_labels" not in r.explanation
    assert r.trace["features"][TAUGHT] == 1.0
    # a resolve with no user is nobody's teaching either
    r = resolve(text=TEXT, user_id=None)
    assert r.explanation["rule"] == "prior" and r.explanation["fit_outside_labels"]["feature"] == "user_has_taught"


def test_a_user_who_taught_gets_the_prior_for_a_verb_the_live_fits_labels_held_too_rarely(prior):
    """The prior stands for a user who taught nothing, so having taught takes no query out of its rows
    (``decision.PRIOR_SKIPS``): a user who taught another verb, asking about a verb with only its catalogue phrases
    when the live fit's labels never had one, is decided by the prior."""
    learned_phrase_upsert(phrase="set up another business unit", verb=Verb.objects.get(name="cbu.create"), user_id="teacher")
    never_new = {**prior.params["situations"], "verb_is_new": [5000, 0], "user_has_taught": [0, 5000]}
    live = _live_copy(prior, situations=never_new)
    r = resolve(text=TEXT, user_id="teacher")
    assert r.trace["features"][TAUGHT] == 1.0 and r.trace["features"][NEW] == 1.0
    assert r.explanation["rule"] == "prior"
    assert r.explanation["fit_outside_labels"] == {"fit_version": live.version, "feature": "verb_is_new", "value": 1, "rows": 0}
    # the skip is the prior's alone: asked of the live fit, a newcomer is outside its rows
    f = np.array(r.trace["features"], dtype=float)
    f[TAUGHT] = 0.0
    f[NEW] = 0.0
    assert decision.situation_outside(live.params, f)["feature"] == "user_has_taught"
    assert decision.situation_outside(live.params, f, skip=decision.PRIOR_SKIPS) is None


def test_the_live_fit_decides_what_its_labels_held_and_what_no_fit_held(prior):
    live = _live_copy(prior, situations=dict(prior.params["situations"]))
    r = resolve(text=TEXT, user_id="someone")
    assert r.explanation["rule"] == "learned" and r.explanation["fit_version"] == live.version
    assert "fit_outside_labels" not in r.explanation
    # neither the live fit's labels nor the prior's rows held it: the live fit decides, and says nothing of it
    never = {**prior.params["situations"], "verb_is_new": [5000, 0]}
    DecisionFit.objects.filter(pk=live.pk).update(params={**live.params, "situations": never})
    DecisionFit.objects.filter(pk=prior.pk).update(params={**prior.params, "situations": never})
    decision_cache_clear()
    r = resolve(text=TEXT, user_id="someone")
    assert r.explanation["rule"] == "learned" and r.explanation["fit_version"] == live.version
    assert "fit_outside_labels" not in r.explanation and not r.degraded_reason


def test_a_fit_stored_before_fits_recorded_situations_decides_as_before(prior):
    params = {k: v for k, v in prior.params.items() if k != "situations"}
    live = _live_copy(prior)
    DecisionFit.objects.filter(pk=live.pk).update(params=params)
    decision_cache_clear()
    r = resolve(text=TEXT, user_id="newcomer")
    assert r.explanation["rule"] == "learned" and "fit_outside_labels" not in r.explanation


def test_a_prior_from_before_situations_were_recorded_is_refitted(prior, settings):
    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6  # no fit from labels here: only the prior's upkeep
    assert decision_refit()["prior"] is None  # current: kept
    DecisionFit.objects.filter(pk=prior.pk).update(params={k: v for k, v in prior.params.items() if k != "situations"})
    again = decision_refit()["prior"]
    assert again > prior.version and "situations" in DecisionFit.objects.get(version=again).params
    assert decision_refit()["prior"] is None


def test_the_shadow_answers_as_it_would_live_for_a_situation_its_labels_did_not_hold(prior):
    """Live, a fit gives a query its labels did not hold to the prior: so does its shadow answer, which the labels
    then judge. While the prior decides (no live fit from labels), the shadow's answer is the prior's."""
    DecisionFit.objects.filter(pk=prior.pk).update(params={**prior.params, "cut": 0.5})  # this prior then resolves
    taught_only = {**prior.params["situations"], "user_has_taught": [0, 5000]}
    shadow = _live_copy(prior, shadow=True, situations=taught_only, cut=1.0)  # alone, it would never auto-resolve
    r = resolve(text=TEXT, user_id="newcomer")
    assert r.explanation["rule"] == "prior" and r.outcome == "resolved"  # the shadow's own cut would have asked
    assert r.trace["shadow_version"] == shadow.version
    assert (r.trace["shadow_outcome"], r.trace["shadow_verb"]) == (r.outcome, r.trace["top_verb"])
    # a user its labels held: the shadow's own answer (its cut of 1.0 asks)
    learned_phrase_upsert(phrase="set up another business unit", verb=Verb.objects.get(name="cbu.create"), user_id="teacher")
    r = resolve(text=TEXT, user_id="teacher")
    assert r.trace["shadow_version"] == shadow.version and r.trace["shadow_outcome"] == "ambiguous"


def test_no_shadow_answer_when_the_live_fit_decided_what_the_shadows_labels_did_not_hold(prior):
    """The shadow fit would give the query to the prior, whose answer was not computed: nothing is recorded for it,
    so its figures judge only answers it would give."""
    live = _live_copy(prior, situations=dict(prior.params["situations"]))
    shadow = _live_copy(prior, shadow=True, situations={**prior.params["situations"], "user_has_taught": [0, 5000]})
    r = resolve(text=TEXT, user_id="newcomer")
    assert r.explanation["fit_version"] == live.version
    assert "shadow_version" not in r.trace
    learned_phrase_upsert(phrase="set up another business unit", verb=Verb.objects.get(name="cbu.create"), user_id="teacher")
    r = resolve(text=TEXT, user_id="teacher")
    assert r.trace["shadow_version"] == shadow.version
