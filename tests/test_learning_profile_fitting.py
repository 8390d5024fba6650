"""Fitting the resolve threshold and margin on gold labels (scored on a held-out share), activated by a reviewer."""

import pytest

from common.api import ApplicationError
from learning import fitting
from learning.models import FittedResolutionProfile, Verb
from learning.resolution import profile
from learning.selectors import active_profile_cache_clear
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from learning.services.profiles import resolution_profile_activate, resolution_profile_fit
from tests.conftest import CBU_CATALOGUE

GOLD = {
    "cbu.list": [
        "list all cbus",
        "show me every cbu",
        "what cbus do we have",
        "cbu list please",
        "display the cbus",
        "all my cbus",
        "enumerate cbus",
        "give me the cbu overview",
    ],
    "cbu.create": [
        "make a new cbu",
        "set up a cbu",
        "new cbu for acme",
        "add a cbu",
        "register a client business unit",
        "start a cbu",
        "create cbu now",
        "open cbu for client",
    ],
    "cbu.delete": [
        "drop this cbu",
        "get rid of the cbu",
        "erase cbu",
        "delete cbu 42",
        "remove that cbu",
        "close down the cbu",
        "kill the cbu",
        "wipe the cbu",
    ],
    "document.search": [
        "look for a contract",
        "find the invoice pdf",
        "search my files",
        "where is the document",
        "locate the report",
        "search for policy docs",
        "find documents about tax",
        "document lookup",
    ],
    "email.send": [
        "write to my boss",
        "mail the team",
        "send a message to bob",
        "email the client",
        "drop an email to hr",
        "send mail",
        "email finance",
        "compose an email",
    ],
}


@pytest.fixture(autouse=True)
def fresh_profile_cache():
    active_profile_cache_clear()
    yield
    active_profile_cache_clear()


@pytest.fixture
def gold(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    verbs = {v.name: v for v in Verb.objects.all()}
    for verb, phrases in GOLD.items():
        for text in phrases:
            learned_phrase_upsert(phrase=text, verb=verbs[verb], user_id="u1", source="correction")


def test_fit_keeps_wrong_answers_under_the_limit_and_prefers_right_ones():
    examples = [fitting.GoldScore(f"a{i}", 0.9, 0.5, True) for i in range(80)]
    examples += [fitting.GoldScore(f"b{i}", 0.7, 0.65, False) for i in range(20)]  # close calls, wrong
    examples += [fitting.GoldScore(f"c{i}", 0.75, 0.6, True) for i in range(20)]
    threshold, margin, figures = fitting.fit(examples, max_wrong_pct=3.0)
    assert figures["wrong"] <= 3.0
    assert figures["correct"] == pytest.approx(100.0 * 100 / 120, abs=0.01)  # both right groups answered
    assert margin > 0.05 and threshold <= 0.75
    assert fitting.evaluate(examples, threshold, margin) == figures


def test_split_is_deterministic_and_near_the_share():
    examples = [fitting.GoldScore(f"user|text {i}", 0.8, 0.2, True) for i in range(2000)]
    train, held_out = fitting.split(examples, 0.25)
    assert fitting.split(examples, 0.25) == (train, held_out)
    assert 0.21 < len(held_out) / len(examples) < 0.29
    assert not {e.key for e in train} & {e.key for e in held_out}


def test_fitted_profile_is_proposed_then_live_only_when_activated(gold, settings, django_user_model, written_for_floors):
    before = profile()
    row = resolution_profile_fit(held_out_share=0.3)
    assert row.status == "proposed" and row.gold_count == 40
    assert row.train_count + row.held_out_count == 40 and row.held_out_count > 0
    assert row.baseline == {"resolve_threshold": before["resolve_threshold"], "margin": before["margin"]}
    for figures in (row.held_out_current, row.held_out_fitted):
        assert figures["n"] == row.held_out_count
        assert figures["correct"] + figures["wrong"] + figures["asked"] == pytest.approx(100.0, abs=0.05)
    assert row.train_fitted["wrong"] <= 3.0
    assert profile() == before  # proposed only

    reviewer = django_user_model.objects.create_user("rita")
    resolution_profile_activate(fitted=row, reviewer=reviewer)
    live = profile()
    assert (live["resolve_threshold"], live["margin"]) == (row.resolve_threshold, row.margin)
    row.refresh_from_db()
    assert row.activated_by == reviewer and row.activated_at is not None

    second = resolution_profile_fit(held_out_share=0.3)
    resolution_profile_activate(fitted=second)
    assert FittedResolutionProfile.objects.get(pk=row.pk).status == "retired"
    assert FittedResolutionProfile.objects.filter(status="active").count() == 1

    settings.RESOLUTION_OVERRIDES = {"resolve_threshold": 0.99}
    active_profile_cache_clear()
    assert profile()["resolve_threshold"] == 0.99  # an operator's environment override still wins


def test_too_few_gold_labels_is_refused(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    with pytest.raises(ApplicationError) as exc:
        resolution_profile_fit()
    assert exc.value.field == "gold_labels"
    assert not FittedResolutionProfile.objects.exists()


def test_admin_fit_and_activate(gold, admin_client):
    listing = admin_client.get("/admin/learning/fittedresolutionprofile/")
    assert listing.status_code == 200 and "Fit on gold labels now" in listing.content.decode()
    response = admin_client.post("/admin/learning/fittedresolutionprofile/fit/")
    assert response.status_code == 302
    row = FittedResolutionProfile.objects.get()
    page = admin_client.get("/admin/learning/fittedresolutionprofile/").content.decode()
    assert "% right" in page and "proposed" in page
    admin_client.post("/admin/learning/fittedresolutionprofile/", {"action": "activate", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.status == "proposed"  # the confirmation page first
    admin_client.post(
        "/admin/learning/fittedresolutionprofile/", {"action": "activate", "_selected_action": [row.pk], "post": "yes"}
    )
    row.refresh_from_db()
    assert row.status == "active"
    assert profile()["margin"] == row.margin


def test_a_fitted_profile_is_judged_by_the_rule_the_resolver_applies():
    """0.85 over 0.80 leads by the margin 0.05 as the resolver compares it (to 4 places), not by 0.0499999."""
    from learning.resolution import Candidate, _decide

    p = {"resolve_threshold": 0.80, "margin": 0.05}
    ranked = [Candidate("a.b", 0.85, "catalogue_semantic", "x"), Candidate("c.d", 0.80, "catalogue_semantic", "y")]
    assert _decide(ranked, p) == ("resolved", "a.b")
    assert fitting.evaluate([fitting.GoldScore("k", 0.85, 0.80, True)], 0.80, 0.05)["correct"] == 100.0
