"""Calibrating again on unchanged data (a second cycle, a redelivered task, a report) leaves consult's adjustment alone."""

from io import StringIO

import pytest
from django.core.management import call_command

from actions.models import Action
from agents.models import Agent
from autonomy.models import CalibrationRecord
from autonomy.selectors import latest_calibration
from autonomy.services import autonomy_cycles_run, calibration_compute
from autonomy.tasks import autonomy_cycle
from feedback.models import Proposal

pytestmark = pytest.mark.django_db


def add_proposals(agent, action, confidence, successes, failures):
    Proposal.objects.bulk_create(
        [
            Proposal(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=confidence, status=status)
            for status in ["completed"] * successes + ["rejected"] * failures
        ]
    )


@pytest.fixture
def smoothed():
    """An agent whose live adjustment has been smoothed once: -0.15, then toward raw -0.1167 (-0.14)."""
    agent = Agent.objects.create(name="cal-twice")
    send, crm = Action.objects.create(name="email.send"), Action.objects.create(name="crm.update")
    add_proposals(agent, send, 0.95, 8, 12)  # gap +.55: raw capped at -0.15
    assert calibration_compute(agent_id=agent.pk)[0].recommended_adjustment == pytest.approx(-0.15)
    add_proposals(agent, crm, 0.8, 36, 4)  # 60 samples: conf .85, success .7333, raw -.1167
    overall = calibration_compute(agent_id=agent.pk)[0]
    assert overall.raw_adjustment == pytest.approx(-0.116667, abs=1e-6)
    assert overall.recommended_adjustment == pytest.approx(0.3 * -0.116667 + 0.7 * -0.15, abs=1e-6)
    return agent, send, crm


def live(agent, action=None) -> float:
    return latest_calibration(agent_id=agent.pk, action_id=action.pk if action else None).recommended_adjustment


def test_calibrating_the_same_data_again_answers_the_latest_records_unchanged(smoothed):
    agent, send, crm = smoothed
    before = live(agent), live(agent, send), live(agent, crm), CalibrationRecord.objects.count()
    latest = calibration_compute(agent_id=agent.pk)
    for _ in range(2):
        again = calibration_compute(agent_id=agent.pk)
        assert [r.pk for r in again] == [r.pk for r in latest]
    assert (live(agent), live(agent, send), live(agent, crm), CalibrationRecord.objects.count()) == before


def test_new_evidence_smooths_once_and_only_its_own_scopes(smoothed):
    agent, send, crm = smoothed
    overall = live(agent)
    crm_record = latest_calibration(agent_id=agent.pk, action_id=crm.pk)
    add_proposals(agent, send, 0.95, 2, 0)  # email.send and the overall scope change, crm.update does not
    records = {r.action_id: r for r in calibration_compute(agent_id=agent.pk)}
    assert records[crm.pk].pk == crm_record.pk  # unchanged evidence: the same record
    new = records[None]
    assert new.recommended_adjustment == pytest.approx(0.3 * new.raw_adjustment + 0.7 * overall, abs=1e-6)
    count = CalibrationRecord.objects.count()
    assert calibration_compute(agent_id=agent.pk)[0].pk == new.pk and CalibrationRecord.objects.count() == count


def test_the_cycle_task_run_again_or_redelivered_does_not_move_the_adjustment(smoothed):
    agent, _send, _crm = smoothed
    before = live(agent), CalibrationRecord.objects.count()
    for _ in range(3):
        result = autonomy_cycle.apply(args=(agent.pk,)).get()
        assert result["summary"]["calibration_adjustment"] == pytest.approx(before[0])
    autonomy_cycles_run(agent_ids=[agent.pk])
    assert (live(agent), CalibrationRecord.objects.count()) == before


def test_the_calibrate_report_run_thrice_shows_and_leaves_one_adjustment(smoothed):
    agent, _send, _crm = smoothed
    before = live(agent)
    outputs = []
    for _ in range(3):
        out = StringIO()
        call_command("autonomy_report", "calibrate", str(agent.pk), stdout=out)
        outputs.append(out.getvalue())
    assert outputs[0] == outputs[1] == outputs[2]
    assert f"recommended adjustment {before:+.3f}" in outputs[0]
    assert live(agent) == before
