"""The calibrate report only looks (any window leaves consult's adjustment and the smoothing as they are), consult's
[0.1, 1.0] bounds never turn an adjustment's direction around, bucket labels show the configured edges, and
CALIBRATION_BUCKETS is checked at start."""

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from actions.models import Action
from autonomy.calibration import bucket_labels
from autonomy.models import CalibrationRecord
from autonomy.selectors import action_consult, latest_calibration
from autonomy.services import calibration_compute
from autonomy.services.calibration import calibration_preview
from feedback.models import Proposal
from tests.conftest import reviewer_user

ROOT = Path(__file__).resolve().parent.parent
QUARTILES = [0.0, 0.25, 0.5, 0.75, 1.0]


def add_proposals(agent, action, confidence, successes, failures, days_ago=10):
    rows = Proposal.objects.bulk_create(
        [
            Proposal(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=confidence, status=status)
            for status in ["completed"] * successes + ["rejected"] * failures
        ]
    )
    Proposal.objects.filter(pk__in=[r.pk for r in rows]).update(created_at=timezone.now() - timedelta(days=days_ago))


def live(agent) -> float:
    return latest_calibration(agent_id=agent.pk, action_id=None).recommended_adjustment


def report(agent, *args) -> str:
    out = StringIO()
    call_command("autonomy_report", "calibrate", agent.name, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def smoothed(agent):
    """An overconfident history (-0.15) that left the 30-day window, then well-calibrated outcomes 10 days old:
    the cycle's live adjustment is smoothed to 0.7 x -0.15 = -0.105."""
    send = Action.objects.create(name="email.send")
    add_proposals(agent, send, 0.95, 8, 12, days_ago=40)
    assert calibration_compute(agent_id=agent.pk, window_days=60)[0].recommended_adjustment == pytest.approx(-0.15)
    add_proposals(agent, send, 0.8, 16, 4)  # confidence .8, success .8: raw 0
    cycle = calibration_compute(agent_id=agent.pk)[0]
    assert (cycle.raw_adjustment, cycle.recommended_adjustment) == (0, pytest.approx(-0.105))
    return agent, send


@pytest.mark.django_db
def test_reports_over_another_window_leave_the_live_adjustment_and_the_smoothing_alone(smoothed):
    agent, _send = smoothed
    before, records = live(agent), CalibrationRecord.objects.count()
    latest = latest_calibration(agent_id=agent.pk, action_id=None).pk
    for _ in range(3):
        report(agent, "--window-days", "29")  # the operator looks at the last 29 days
        again = calibration_compute(agent_id=agent.pk)[0]  # the hourly cycle, on the same outcomes
        assert again.pk == latest
        assert live(agent) == before == pytest.approx(-0.105)
    assert CalibrationRecord.objects.count() == records


@pytest.mark.django_db
def test_a_report_window_with_no_samples_shows_none_and_consult_keeps_its_adjustment(smoothed):
    agent, send = smoothed
    before = action_consult(agent=agent, action_name=send.name, confidence=0.9)
    text = report(agent, "--window-days", "1")  # every outcome is 10 days old
    assert "over 1 days (0 samples)" in text and "recommended adjustment +0.000" in text
    assert "Consult applies -0.105 overall" in text and "over 30 days" in text
    after = action_consult(agent=agent, action_name=send.name, confidence=0.9)
    assert (after["calibration_adjustment"], after["adjusted_confidence"]) == (-0.105, 0.795)
    assert after == before
    # the next cycle on the same data answers the smoothed record, not a restart from the raw adjustment
    assert calibration_compute(agent_id=agent.pk)[0].recommended_adjustment == pytest.approx(-0.105)


@pytest.mark.django_db
def test_the_report_over_the_cycle_window_shows_what_the_next_cycle_stores_without_storing_it(smoothed):
    agent, send = smoothed
    add_proposals(agent, send, 0.95, 2, 8, days_ago=1)  # new overconfident outcomes
    records = CalibrationRecord.objects.count()
    preview = calibration_preview(agent_id=agent.pk)[0]
    text = report(agent)
    assert preview.pk is None and CalibrationRecord.objects.count() == records
    assert live(agent) == pytest.approx(-0.105)
    stored = calibration_compute(agent_id=agent.pk)[0]
    assert stored.pk is not None and stored.recommended_adjustment == preview.recommended_adjustment
    assert stored.recommended_adjustment < -0.105  # the new outcomes moved it, once
    assert f"recommended adjustment {stored.recommended_adjustment:+.3f}" in text


@pytest.mark.django_db
def test_a_report_for_an_agent_never_calibrated_stores_nothing_and_says_consult_applies_none(agent):
    add_proposals(agent, Action.objects.create(name="email.send"), 0.95, 8, 12)
    text = report(agent)
    assert "recommended adjustment -0.150" in text
    assert "Consult applies no adjustment overall" in text
    assert CalibrationRecord.objects.count() == 0
    assert action_consult(agent=agent, action_name="email.send", confidence=0.9)["calibration_adjustment"] == 0.0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("stated", "adjustment", "answered"),
    [
        (0.05, -0.15, 0.05),  # already below the floor: a negative adjustment does not raise it to 0.1
        (0.2, -0.15, 0.1),  # lowered, down to the floor
        (0.9, -0.15, 0.75),
        (0.02, 0.05, 0.07),  # raised by the adjustment, not lowered or pulled up to the floor
        (0.95, 0.1, 1.0),  # raised, up to 1
        (0.5, 0.1, 0.6),
    ],
)
def test_consult_moves_a_confidence_only_the_way_the_calibration_adjustment_points(agent, stated, adjustment, answered):
    action = Action.objects.create(name="email.send")
    CalibrationRecord.objects.create(
        agent=agent,
        action=None,
        window_days=30,
        sample_count=40,
        total_samples=40,
        buckets=[],
        mean_confidence=0.9,
        mean_success=0.9 + adjustment,
        ece=0.4,
        raw_adjustment=adjustment,
        recommended_adjustment=adjustment,
    )
    answer = action_consult(agent=agent, action_name=action.name, confidence=stated)
    assert answer["calibration_adjustment"] == adjustment
    assert answer["adjusted_confidence"] == pytest.approx(answered)
    if adjustment < 0:
        assert answer["adjusted_confidence"] <= stated
    else:
        assert answer["adjusted_confidence"] >= stated


@pytest.mark.parametrize(
    ("edges", "labels"),
    [
        ([0.0, 0.5, 0.7, 0.9, 1.0], ["0.0-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0"]),
        (QUARTILES, ["0.00-0.25", "0.25-0.50", "0.50-0.75", "0.75-1.00"]),
        ([0.0, 0.125, 1.0], ["0.000-0.125", "0.125-1.000"]),
    ],
)
def test_bucket_labels_show_the_edges_with_the_decimals_they_need(edges, labels):
    buckets = [{"low": low, "high": high} for low, high in zip(edges, edges[1:], strict=False)]
    assert bucket_labels(buckets) == labels


@pytest.fixture
def quartiles(agent, settings):
    settings.CALIBRATION_BUCKETS = QUARTILES
    settings.CALIBRATION_MIN_BUCKET_SAMPLES = 1
    send = Action.objects.create(name="email.send")
    for confidence in (0.1, 0.3, 0.6, 0.8):
        add_proposals(agent, send, confidence, 1, 0, days_ago=1)
    return agent


@pytest.mark.django_db
def test_the_report_table_labels_buckets_with_the_configured_edges(quartiles):
    lines = report(quartiles).splitlines()
    rows = {line.split()[0]: line.split()[1] for line in lines if line[:1].isdigit()}
    assert rows == {"0.00-0.25": "1", "0.25-0.50": "1", "0.50-0.75": "1", "0.75-1.00": "1"}


@pytest.mark.django_db
def test_the_reliability_diagram_labels_buckets_with_the_configured_edges(quartiles, client):
    record = calibration_compute(agent_id=quartiles.pk)[0]
    client.force_login(reviewer_user("boss", superuser=True))
    response = client.get(f"/admin/autonomy/calibrationrecord/{record.pk}/change/")
    assert response.status_code == 200
    labels = [b["label"] for b in response.context["chart_data"]["buckets"]]
    assert labels == ["0.00–0.25", "0.25–0.50", "0.50–0.75", "0.75–1.00"]


def _start(**env):
    base = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "CALIBRATION_BUCKETS"}}
    base.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="1", **env)
    show = ["-c", "import django; django.setup(); from django.conf import settings; print(settings.CALIBRATION_BUCKETS)"]
    return subprocess.run([sys.executable, *show], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "value",
    [
        "0.5,1",  # does not start at 0
        "0,0.5,0.9",  # does not end at 1: confidences above 0.9 would land in the last bucket
        "0,0.7,0.5,1",  # not increasing
        "0,0.5,0.5,1",  # an empty bucket
        "1",  # one edge
        "0,half,1",  # not numbers
        "0,nan,1",
    ],
)
def test_calibration_buckets_that_are_not_increasing_edges_from_0_to_1_stop_the_start(value):
    result = _start(CALIBRATION_BUCKETS=value)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and f"CALIBRATION_BUCKETS={value!r}" in result.stderr


def test_calibration_buckets_read_from_the_environment_or_the_default():
    assert _start(CALIBRATION_BUCKETS="0,0.25,0.5,0.75,1").stdout.split() == ["[0.0,", "0.25,", "0.5,", "0.75,", "1.0]"]
    assert _start(CALIBRATION_BUCKETS=" ").stdout.split() == ["[0.0,", "0.5,", "0.7,", "0.9,", "1.0]"]
