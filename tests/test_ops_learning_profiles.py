"""fit_resolution_profile refuses a maximum wrong percentage that is not a percentage."""

import math

import pytest
from django.core.management import CommandError, call_command

from common.api import ApplicationError
from learning.models import FittedResolutionProfile
from learning.services.profiles import resolution_profile_fit
from tests.test_learning_profile_fitting import gold  # noqa: F401  (fixture)

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
