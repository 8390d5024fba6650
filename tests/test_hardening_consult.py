"""Consult uses the action's own calibration only when it counted samples; otherwise the agent-wide one."""

from actions.models import Action, AutonomyLevel
from autonomy.models import CalibrationRecord
from autonomy.selectors import action_consult, latest_calibration


def _record(agent, action, *, samples, adjustment):
    return CalibrationRecord.objects.create(
        agent=agent,
        action=action,
        window_days=30,
        sample_count=samples,
        total_samples=samples,
        buckets=[],
        recommended_adjustment=adjustment,
        ece=0.12,
    )


def test_per_action_calibration_without_samples_falls_back_to_the_agent_wide_one(api):
    agent = api.agent
    action = Action.objects.create(name="email.send", description="Send", autonomy_level=AutonomyLevel.ACT_REVIEWED)
    overall = _record(agent, None, samples=40, adjustment=-0.1)
    empty = _record(agent, action, samples=0, adjustment=0.15)  # newer, but measured nothing

    assert latest_calibration(agent_id=agent.pk, action_id=action.pk) == overall
    answer = action_consult(agent=agent, action_name="email.send", confidence=0.8)
    assert answer["calibration_adjustment"] == -0.1
    assert answer["adjusted_confidence"] == 0.7

    own = _record(agent, action, samples=12, adjustment=0.05)
    assert latest_calibration(agent_id=agent.pk, action_id=action.pk) == own
    assert action_consult(agent=agent, action_name="email.send", confidence=0.8)["calibration_adjustment"] == 0.05
    assert empty.pk != own.pk


def test_no_calibration_at_all_means_no_adjustment(api):
    Action.objects.create(name="email.send", description="Send", autonomy_level=AutonomyLevel.ACT_REVIEWED)
    assert latest_calibration(agent_id=api.agent.pk, action_id=None) is None
    assert action_consult(agent=api.agent, action_name="email.send", confidence=0.8)["calibration_adjustment"] == 0.0
