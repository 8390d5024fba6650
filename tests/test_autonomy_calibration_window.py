"""Calibration once an agent's samples leave the window: no counted samples, no adjustment, and consult still answers."""

import pytest

from actions.models import Action, AutonomyLevel
from autonomy.calibration import build_buckets
from autonomy.models import CalibrationRecord
from autonomy.selectors import latest_calibration
from autonomy.services import autonomy_cycles_run, calibration_compute
from feedback.models import Proposal
from tests.conftest import fill_history, make_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def aged_out():
    """An agent measured overconfident on email.send (-0.15, ECE 0.4) whose samples then all left the window."""
    client = make_client(["resolve", "feedback"], name="cal-agent")
    send = Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.AUTONOMOUS)
    crm = Action.objects.create(name="crm.update", autonomy_level=AutonomyLevel.AUTONOMOUS)
    fill_history(send, client.agent, completed=10, rejected=10)  # confidence .9, success .5: raw capped at -0.15
    first = {r.action_id: r for r in calibration_compute(agent_id=client.agent.pk)}
    assert first[None].recommended_adjustment == pytest.approx(-0.15)
    assert first[send.pk].recommended_adjustment == pytest.approx(-0.15) and first[send.pk].ece == pytest.approx(0.4)
    Proposal.objects.all().delete()  # the samples aged out of the window
    return client, send, crm


def consult(client, action, confidence=0.9):
    return client.get(f"/api/v1/actions/{action}/consult", {"confidence": confidence})


def test_consult_answers_without_adjustment_once_the_samples_left_the_window(aged_out):
    client, send, crm = aged_out
    overall = calibration_compute(agent_id=client.agent.pk)[0]
    for action in ("crm.update", "email.send"):
        r = consult(client, action)
        assert r.status_code == 200, r.content
        body = r.json()
        assert body["calibration_adjustment"] == 0.0 and body["adjusted_confidence"] == 0.9
        assert not [w for w in body["warnings"] if "Calibration" in w]
    assert overall.ece is None and overall.sample_count == 0 and overall.recommended_adjustment == 0.0


def test_an_action_whose_samples_left_the_window_gets_a_fresh_record(aged_out):
    client, send, _crm = aged_out
    records = {r.action_id: r for r in calibration_compute(agent_id=client.agent.pk)}
    fresh = records[send.pk]
    assert fresh.pk is not None and (fresh.sample_count, fresh.total_samples, fresh.ece) == (0, 0, None)
    assert fresh.recommended_adjustment == 0.0 and fresh.raw_adjustment == 0.0
    assert latest_calibration(agent_id=client.agent.pk, action_id=send.pk).recommended_adjustment == 0.0


def test_calibrating_an_empty_window_again_writes_nothing_new(aged_out):
    client, _send, _crm = aged_out
    first = [r.pk for r in calibration_compute(agent_id=client.agent.pk)]
    count = CalibrationRecord.objects.count()
    assert [r.pk for r in calibration_compute(agent_id=client.agent.pk)] == first
    assert CalibrationRecord.objects.count() == count


def test_samples_after_an_empty_window_start_from_their_own_raw_adjustment(aged_out, settings):
    client, send, _crm = aged_out
    calibration_compute(agent_id=client.agent.pk)  # the empty window: adjustment 0
    fill_history(send, client.agent, completed=16, rejected=4)  # confidence .9, success .8: ECE .1 is not above it
    settings.CALIBRATION_ECE_THRESHOLD = 0.05
    records = {r.action_id: r for r in calibration_compute(agent_id=client.agent.pk)}
    # as a first measurement: the raw adjustment itself, not smoothed against the empty run's 0 nor the old -0.15
    assert records[None].raw_adjustment == pytest.approx(-0.1)
    assert records[None].recommended_adjustment == pytest.approx(-0.1)
    assert records[send.pk].recommended_adjustment == pytest.approx(-0.1)


def test_a_stored_adjustment_without_counted_samples_is_not_applied_and_is_replaced(aged_out, settings):
    client, _send, _crm = aged_out
    empty = build_buckets(list(settings.CALIBRATION_BUCKETS), {}, settings.CALIBRATION_MIN_BUCKET_SAMPLES)
    stale = CalibrationRecord.objects.create(  # what an empty window wrote before: ECE none, 0.7 x the last adjustment
        agent=client.agent,
        window_days=settings.CALIBRATION_WINDOW_DAYS,
        sample_count=0,
        total_samples=0,
        ece=None,
        raw_adjustment=0.0,
        recommended_adjustment=-0.105,
        buckets=[b.as_dict() for b in empty],
    )
    r = consult(client, "crm.update")
    assert r.status_code == 200, r.content
    assert r.json()["calibration_adjustment"] == 0.0
    overall = calibration_compute(agent_id=client.agent.pk)[0]
    assert overall.pk != stale.pk and overall.recommended_adjustment == 0.0


def test_the_set_based_cycle_calibrates_an_aged_out_action_afresh(aged_out):
    client, send, _crm = aged_out
    autonomy_cycles_run(agent_ids=[client.agent.pk])
    own = CalibrationRecord.objects.filter(agent=client.agent, action=send).order_by("-computed_at", "-id").first()
    assert (own.sample_count, own.ece, own.recommended_adjustment) == (0, None, 0.0)
    overall = latest_calibration(agent_id=client.agent.pk, action_id=None)
    assert (overall.sample_count, overall.ece, overall.recommended_adjustment) == (0, None, 0.0)
    assert consult(client, "email.send").json()["calibration_adjustment"] == 0.0
