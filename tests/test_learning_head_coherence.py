"""What another process changes in the decision's stored state reaches this process's in-memory copies.

"Another process" is a change made with SQL on the test's own connection: no service, ``on_commit`` hook or
signal of this process runs, as a web worker sees what a Celery worker, the admin in another worker or the
``erase_user`` command did. A user's own classifier head erased with their data stops deciding for them within
RESOLVE_DECISION_CACHE_S and never warm-starts a new head; the marker of a sent refit stops holding the next one
back once a newer fit exists."""

import time

import numpy as np
import pytest
from django.core.cache.backends.locmem import LocMemCache
from django.db import connection

from learning import decision, selectors
from learning.models import DecisionFit, DecisionHead
from learning.resolution import resolve
from learning.services import decisions as decision_services
from learning.services.catalogue import verb_catalogue_load
from learning.services.decisions import decision_prior_fit
from tests.test_learning_decision import BIG

pytestmark = pytest.mark.django_db

TEXT = "please send an email to my manager"


@pytest.fixture
def prior(db, settings):
    settings.RESOLVE_DECISION_CACHE_S = 0.05
    verb_catalogue_load(entries=BIG)
    fit = decision_prior_fit()
    assert fit is not None and fit.status == DecisionFit.Status.LIVE
    selectors.decision_cache_clear()
    yield fit
    selectors.decision_cache_clear()


def _personal_head(fit, user_id: str) -> DecisionHead:
    """A head of ``user_id`` that answers otherwise than the deployment's (its verb columns rolled by one)."""
    deployment = DecisionHead.objects.get(fit=fit, user_id=None)
    head, verbs = decision.head_loads(deployment.weights)
    rolled = {"W": np.roll(head["W"], 1, axis=1), "b": np.roll(head["b"], 1), "classes": head["classes"]}
    return DecisionHead.objects.create(
        fit=fit, user_id=user_id, weights=decision.head_dumps(rolled, verbs), anchors=deployment.anchors
    )


def _erase_heads_elsewhere(user_id: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM learning_decisionhead WHERE user_id = %s", [user_id])
        assert cursor.rowcount == 1


def test_a_head_erased_by_another_process_stops_deciding_and_leaves_this_process(prior):
    _personal_head(prior, "alice")
    _personal_head(prior, "bob")
    assert selectors.decision_head(prior.version, "alice")[3] == "alice"
    assert selectors.decision_head(prior.version, "bob")[3] == "bob"
    everyone = resolve(text=TEXT, user_id="carol").explanation["probability"]
    assert resolve(text=TEXT, user_id="alice").explanation["probability"] != everyone  # her own head answers
    held = selectors.head_cache_bytes()

    _erase_heads_elsewhere("alice")
    time.sleep(0.1)  # RESOLVE_DECISION_CACHE_S

    assert selectors.decision_head(prior.version, "alice")[3] is None  # the deployment's head now
    assert resolve(text=TEXT, user_id="alice").explanation["probability"] == everyone
    assert selectors.decision_head(prior.version, "bob")[3] == "bob"  # another user's head stays
    assert selectors.head_cache_bytes() < held  # her weights are no longer held in this process


def test_a_refit_never_warm_starts_from_a_head_erased_by_another_process(prior, monkeypatch):
    _personal_head(prior, "alice")
    rows = selectors.decision_anchor_rows(model=prior.embedding_model)
    warm_from = []
    real_train = decision.head_train

    trained = []

    def train(*args, warm=None, **kwargs):
        warm_from.append(warm)
        trained.append(real_train(*args, warm=warm, **kwargs))
        return trained[-1]

    monkeypatch.setattr(decision_services.decision, "head_train", train)
    monkeypatch.setattr(selectors, "users_with_phrases", lambda **kw: ["alice"])
    monkeypatch.setattr(selectors, "decision_user_anchor_rows", lambda **kw: ([], [], [], [], []))
    monkeypatch.setattr(selectors, "decision_heads_newest", lambda **kw: {})
    decision_services._heads_train(prior.embedding_model, users=True, warm_version=prior.version)
    assert warm_from[-1] is not None  # an earlier refit in this worker: warm from her head, as designed
    assert selectors.decision_head(prior.version, "alice")[3] == "alice"  # and held in this process

    erased = selectors.decision_head(prior.version, "alice")
    erased_start = decision.head_warm_start(erased[0], erased[1], erased[1], erased[0]["W"].shape[0])
    _erase_heads_elsewhere("alice")  # at once: no wait for RESOLVE_DECISION_CACHE_S
    decision_services._heads_train(prior.embedding_model, users=True, warm_version=prior.version)
    # her new head starts from the deployment's head trained just before it on the shared phrases, not from hers
    deployment, verbs = trained[-2], sorted(set(rows[1]))
    assert not np.array_equal(warm_from[-1]["W"], erased_start["W"])
    np.testing.assert_array_equal(
        warm_from[-1]["W"], decision.head_warm_start(deployment, verbs, verbs, warm_from[-1]["W"].shape[0])["W"]
    )
    assert len(rows[0]) > 0


def test_a_refit_made_in_another_process_lets_the_next_labels_send_one(db, monkeypatch, django_capture_on_commit_callbacks):
    """Without CACHE_URL every process has its own cache: the web process's marker of a sent refit is not deleted
    by the worker that ran it; it names the newest fit, so once that worker made a newer one, due labels send."""
    web, worker = LocMemCache("head-coherence-web", {}), LocMemCache("head-coherence-worker", {})
    newest = {"version": 1}
    sent = []
    monkeypatch.setattr(selectors, "labels_since_newest_fit", lambda at_most: (at_most, newest["version"]))
    monkeypatch.setattr(decision_services, "task_send", lambda name, **kw: sent.append(name) or True)

    def refit(**kwargs):
        newest["version"] += 1
        return {"prior": None, "promoted": None, "shadow": newest["version"], "reason": ""}

    monkeypatch.setattr(decision_services, "_refit", refit)
    monkeypatch.setattr(decision_services, "cache", web)

    def label():
        with django_capture_on_commit_callbacks(execute=True):
            decision_services._refit_if_due()

    label()
    label()  # more labels while it is queued: not sent again
    assert sent == ["learning.decision_refit"]

    monkeypatch.setattr(decision_services, "cache", worker)
    assert decision_services.decision_refit(due=True)["shadow"] == 2
    monkeypatch.setattr(decision_services, "cache", web)
    label()  # as many labels again since fit 2
    assert sent == ["learning.decision_refit"] * 2
