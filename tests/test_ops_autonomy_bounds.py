"""Operators' day counts, limits and batch sizes are bounded: a clear error naming the option, never a traceback."""

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from actions.models import Action
from agents.models import Agent
from autonomy.services import autonomy_evaluate, calibration_compute
from common.api import ApplicationError
from feedback.services.mistakes import mistake_patterns_detect
from feedback.services.retention import feedback_records_archive, feedback_records_to_archive

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999"


@pytest.fixture
def agent():
    Action.objects.create(name="email.send")
    return Agent.objects.create(name="bounded")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["detect_mistakes", "--window-days", "999999999"], "--window-days must be at most 36500."),
        (["autonomy_report", "mistakes", "bounded", "--window-days", "999999999"], "--window-days must be at most 36500."),
        (["autonomy_report", "calibrate", "bounded", "--window-days", "999999999"], "--window-days must be at most 36500."),
        (["autonomy_report", "autonomy", "email.send", "--window-days", "99999999"], "--window-days must be at most 36500."),
        (["autonomy_report", "feedback", "bounded", "--limit", HUGE], "--limit must be at most 10000."),
        (["archive_feedback_records", "--older-than", "999999999"], "--older-than must be at most 36500 days."),
        (["archive_feedback_records", "--older-than", HUGE + "d"], "--older-than must be at most 36500 days."),
        (["archive_feedback_records", "--batch", HUGE], "--batch must be at most 1000000."),
    ],
)
def test_commands_refuse_huge_values_naming_the_option(agent, argv, message):
    with pytest.raises(CommandError) as exc:
        call_command(*argv)
    assert str(exc.value) == message


def test_services_refuse_huge_windows_and_batches(agent):
    for call in (
        lambda: mistake_patterns_detect(agent_id=agent.pk, window_days=999999999),
        lambda: calibration_compute(agent_id=agent.pk, window_days=999999999),
        lambda: autonomy_evaluate(window_days=99999999, force=True),
        lambda: feedback_records_to_archive(older_than_days=999999999),
        lambda: feedback_records_archive(older_than_days=365, batch_size=10**20),
    ):
        with pytest.raises(ApplicationError, match="must be at most"):
            call()


def test_the_largest_allowed_values_work(agent):
    out = StringIO()
    # a detection window stops short of the feedback records' retention (older ones are archived)
    call_command("detect_mistakes", "--window-days", str(settings.FEEDBACK_RECORD_RETENTION_DAYS - 1), stdout=out)
    call_command("autonomy_report", "calibrate", "bounded", "--window-days", "36500", stdout=out)
    call_command("autonomy_report", "autonomy", "email.send", "--window-days", "36500", stdout=out)
    call_command("autonomy_report", "feedback", "bounded", "--limit", "10000", stdout=out)
    call_command("archive_feedback_records", "--older-than", "36500d", "--batch", "1000000", stdout=out)
    assert "0 feedback record(s)" in out.getvalue()
