"""The decision fit tasks: in the tenants they were sent for, each on its own phrases, and once for one change."""

import contextlib
import dataclasses

import pytest

from learning.catalogue import VerbEntry
from tests.test_learning_decision import BIG


def _run_on_commit(callbacks):
    """Captured on_commit callbacks run as Django runs them with ``robust=True``; answers their exceptions."""
    errors = []
    for cb in callbacks:
        try:
            cb()
        except Exception as exc:
            errors.append(exc)
    return errors


def test_prior_fit_sent_by_a_two_tenant_reviewers_verb_edit_refits_the_verbs_tenant(
    db, settings, django_capture_on_commit_callbacks
):
    """A reviewer of two tenants works in the admin in the scope of both: a verb switched on there sends the prior's fit
    with both tenants in its headers. A fit belongs to one tenant and reads one tenant's phrases: the task fits
    each tenant's on its own."""
    from learning.models import DecisionFit, Verb
    from learning.services.catalogue import verb_catalogue_load, verb_edit
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default
    from tenants.services import tenant_create

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    home, other = tenant_default(), tenant_create(slug="second")
    with tenant_scope([home.pk]):  # one verb retired: the reviewer switches it back on
        verb_catalogue_load(entries=[dataclasses.replace(e, is_active=e.name != "cbu.create") for e in BIG])
    with tenant_scope([other.pk]):
        verb_catalogue_load(entries=[VerbEntry(e.name.replace("cbu.", "unit."), e.domain, "", "", e.phrases) for e in BIG])
    with tenant_scope([home.pk]):
        before = DecisionFit.objects.filter(source="prior").count()

    # the admin's change view of a reviewer who is a member of both tenants
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with tenant_scope([home.pk, other.pk]):
            verb = Verb.objects.get(tenant_id=home.pk, name="cbu.create")
            verb.is_active = True
            verb_edit(verb=verb, fields=["is_active"])
    errors = _run_on_commit(callbacks)  # after the request committed, its scope ended

    with tenant_scope([home.pk]):
        priors = list(DecisionFit.objects.filter(source="prior").order_by("-version"))
        active = Verb.objects.filter(is_active=True).count()
    assert not errors, errors
    assert len(priors) == before + 1
    assert priors[0].params["anchors"] == active * 5  # its own phrases only, not the other tenant's


def test_prior_refresh_that_waited_for_the_fit_lock_does_not_fit_the_same_prior_again(big_catalogue, monkeypatch):
    """A prior fit takes minutes on a large catalogue: a refresh that waited for another worker's fit (the next beat
    tick, a second beat) decides under the lock, and does not fit the same prior again."""
    from learning.models import DecisionFit
    from learning.services import decisions

    live = DecisionFit.objects.get(status="live")
    DecisionFit.objects.filter(pk=live.pk).update(embedding_model="another-model")  # a change of model rolled back
    before = DecisionFit.objects.filter(source="prior").count()
    real = decisions.decision_fits_serialised
    other_worker_done = []

    @contextlib.contextmanager
    def lock_granted_after_another_fit():
        if not other_worker_done:  # the copy that held the lock commits its fit, then this one gets the lock
            other_worker_done.append(decisions._prior_fit())
        with real():
            yield

    monkeypatch.setattr(decisions, "decision_fits_serialised", lock_granted_after_another_fit)
    from learning.tasks import decision_prior_refresh_task
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default

    with tenant_scope([tenant_default().pk]):
        decision_prior_refresh_task()
    assert other_worker_done and other_worker_done[0] is not None
    fits = DecisionFit.objects.filter(source="prior").count() - before
    assert fits == 1


@pytest.fixture
def big_catalogue(db, settings):
    from learning.models import DecisionFit
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    verb_catalogue_load(entries=BIG)
    if not DecisionFit.objects.filter(status="live").exists():
        decision_prior_fit()
    assert DecisionFit.objects.filter(status="live").exists()
