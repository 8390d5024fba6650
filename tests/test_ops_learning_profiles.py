"""fit_resolution_profile refuses a maximum wrong percentage that is not a percentage, and fits one tenant at a
time: its labels, stored in it."""

import math
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from common.api import ApplicationError
from learning.models import FittedResolutionProfile, Verb
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from learning.services.profiles import resolution_profile_fit
from tenants.context import tenant_scope
from tenants.selectors import tenant_default
from tenants.services import membership_add, tenant_create
from tests.conftest import CBU_CATALOGUE, reviewer_user
from tests.test_learning_profile_fitting import GOLD, gold  # noqa: F401  (fixture)

BAD = [math.nan, math.inf, -5.0, 0.0, 100.0, 500.0]


@pytest.mark.parametrize("value", BAD)
def test_service_refuses_and_stores_nothing(gold, value):  # noqa: F811
    with pytest.raises(ApplicationError) as exc:
        resolution_profile_fit(max_wrong_pct=value)
    assert exc.value.field == "max_wrong_pct"
    assert FittedResolutionProfile.objects.count() == 0


@pytest.mark.parametrize("value", ["nan", "-5", "500"])
def test_command_refuses_and_activates_nothing(gold, value):  # noqa: F811
    with pytest.raises(CommandError, match="--max-wrong-pct must be a percentage above 0 and below 100"):
        call_command("fit_resolution_profile", f"--max-wrong-pct={value}", "--activate")
    assert FittedResolutionProfile.objects.count() == 0


def test_command_refuses_a_held_out_share_outside_0_1(db):
    with pytest.raises(CommandError, match="--held-out-share must be above 0 and below 1"):
        call_command("fit_resolution_profile", "--held-out-share=nan")


def test_a_valid_percentage_still_fits(gold):  # noqa: F811
    row = resolution_profile_fit(max_wrong_pct=2.5)
    assert row.max_wrong_pct == 2.5 and row.status == "proposed"


def _gold_in(tenant):
    with tenant_scope([tenant.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
        verbs = {v.name: v for v in Verb.objects.all()}
        for verb, phrases in GOLD.items():
            for text in phrases:
                learned_phrase_upsert(phrase=text, verb=verbs[verb], user_id="u1", source="correction")


def test_the_command_fits_the_named_tenants_labels_into_that_tenant(db):
    acme = tenant_create(slug="acme")
    _gold_in(acme)  # only acme has labels
    with pytest.raises(CommandError, match="gold labels"):
        call_command("fit_resolution_profile", stdout=StringIO())  # the default tenant has none of its own
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        call_command("fit_resolution_profile", "--tenant", "nope", stdout=StringIO())
    out = StringIO()
    call_command("fit_resolution_profile", "--tenant", "acme", "--activate", stdout=out)
    row = FittedResolutionProfile.objects.get()
    assert row.tenant_id == acme.pk and row.status == "active" and "live in acme" in out.getvalue()


def test_the_admin_fits_each_of_a_reviewers_tenants_on_its_own_labels(db, client):
    acme = tenant_create(slug="acme")
    _gold_in(tenant_default())
    _gold_in(acme)
    rita = reviewer_user("rita", "view_fittedresolutionprofile", "change_fittedresolutionprofile")
    membership_add(user=rita, tenant=acme)
    client.force_login(rita)
    done = client.post("/admin/learning/fittedresolutionprofile/fit/", follow=True)
    assert done.status_code == 200 and "Proposed (acme)" in done.content.decode()
    rows = list(FittedResolutionProfile.objects.order_by("tenant__slug").values_list("tenant__slug", "gold_count"))
    assert [slug for slug, _ in rows] == ["acme", "default"]
    assert rows[0][1] == rows[1][1]  # each fitted on its own labels, not on both tenants' pooled
