"""A user's erasure and a refit that trains that user's classifier head at the same time: the erased user's
head is never stored after the erasure. The refit trains heads before its save transaction (minutes for many);
an erasure that commits meanwhile deleted the user's phrases and heads, and the head trained on those phrases
must not be stored after it."""

import threading
import time

import numpy as np
import pytest

from learning.models import DecisionHead, LearnedPhrase, Verb
from learning.services import decisions as fitting
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_prior_fit, decision_refit
from learning.services.phrases import learned_phrase_upsert
from privacy.services import user_data_erase
from tenants.context import tenant_scope
from tenants.selectors import tenant_default
from tests.test_learning_decision import BIG, _labelled


def _setup(settings):
    settings.RESOLVE_USER_HEAD_MIN_PHRASES = 3
    verb_catalogue_load(entries=BIG)
    prior = decision_prior_fit()
    verb = Verb.objects.get(name="weather.get")
    for user in ("alice", "bob"):
        for text in ["umbrella needed?", "sunny or not", f"degrees outside now for {user}"]:
            learned_phrase_upsert(phrase=text, verb=verb, user_id=user)
    _labelled(300, np.random.default_rng(2), prior)
    return prior


@pytest.mark.django_db
def test_a_head_trained_on_the_phrases_of_a_user_erased_meanwhile_is_not_stored(settings, monkeypatch):
    _setup(settings)
    real = fitting._heads_train

    def train_then_erase(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("users"):
            assert {h[0] for h in out[0]} >= {"alice", "bob"}  # her head was trained
            with tenant_scope([tenant_default().pk]):
                user_data_erase(user_id="alice")  # committed before the refit stores what it trained
        return out

    monkeypatch.setattr(fitting, "_heads_train", train_then_erase)
    version = decision_refit()["shadow"]

    stored = set(DecisionHead.objects.filter(fit__version=version).values_list("user_id", flat=True))
    assert stored == {None, "bob"}
    assert not DecisionHead.objects.filter(user_id="alice").exists()
    assert not LearnedPhrase.objects.filter(user_id="alice").exists()


@pytest.mark.django_db
def test_a_head_is_stored_when_its_user_taught_more_while_it_trained(settings, monkeypatch):
    """An active user teaching during a refit's minutes of training still gets the head (the next refit adds the
    new phrase); only phrases it trained on that are gone keep it out."""
    _setup(settings)
    real = fitting._heads_train

    def train_then_teach(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("users"):
            learned_phrase_upsert(phrase="will it snow", verb=Verb.objects.get(name="weather.get"), user_id="alice")
            LearnedPhrase.objects.filter(user_id="bob", normalized="sunny or not").update(is_active=False)
        return out

    monkeypatch.setattr(fitting, "_heads_train", train_then_teach)
    version = decision_refit()["shadow"]
    stored = set(DecisionHead.objects.filter(fit__version=version).values_list("user_id", flat=True))
    assert stored == {None, "alice"}  # bob's head trained on a phrase switched off meanwhile


@pytest.mark.django_db
def test_a_head_is_stored_when_its_users_phrases_did_not_change(settings):
    _setup(settings)
    version = decision_refit()["shadow"]
    assert set(DecisionHead.objects.filter(fit__version=version).values_list("user_id", flat=True)) == {None, "alice", "bob"}


@pytest.mark.django_db(transaction=True)
def test_an_erasure_arriving_while_a_refit_stores_heads_waits_and_then_deletes_the_users_head(settings, monkeypatch):
    """The refit holds the heads' lock while it stores them: the erasure waits for that commit, then deletes the
    user's new head with the rest of their rows."""
    _setup(settings)
    storing, erased = threading.Event(), {}
    real_save = fitting._heads_save

    def slow_save(*args, **kwargs):
        out = real_save(*args, **kwargs)
        storing.set()
        time.sleep(1.5)  # the erasure starts meanwhile and must wait for this commit
        return out

    monkeypatch.setattr(fitting, "_heads_save", slow_save)

    def erase():
        from django.db import connection

        assert storing.wait(60)
        with tenant_scope([tenant_default().pk]):
            erased["rows"] = user_data_erase(user_id="alice")["rows"]
        erased["at"] = time.monotonic()
        connection.close()

    thread = threading.Thread(target=erase)
    thread.start()
    out = decision_refit()
    committed = time.monotonic()
    thread.join(60)

    assert erased["at"] >= committed - 0.05  # it waited for the refit's commit
    assert erased["rows"].get("learning_decisionhead", 0) >= 1  # and deleted the head the refit stored
    assert not DecisionHead.objects.filter(user_id="alice").exists()
    assert DecisionHead.objects.filter(fit__version=out["shadow"], user_id="bob").exists()
