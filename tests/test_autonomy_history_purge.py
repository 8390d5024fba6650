"""The cycles' episodes and calibration records do not pile up forever: past AUTONOMY_HISTORY_RETENTION_DAYS they
go, except the episode an autonomy transition names and the latest calibration of each scope."""

import pytest
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition, CalibrationRecord, Episode, EpisodeEvent
from autonomy.services import autonomy_history_purge
from autonomy.tasks import autonomy_history_purge_task
from common import db
from common.api import ApplicationError

pytestmark = pytest.mark.django_db


def _ago(days: float):
    return timezone.now() - timezone.timedelta(days=days)


def _episode(agent, days_old, events=2):
    episode = Episode.objects.create(agent=agent)
    EpisodeEvent.objects.bulk_create([EpisodeEvent(episode=episode, seq=i + 1, kind="k") for i in range(events)])
    Episode.objects.filter(pk=episode.pk).update(started_at=_ago(days_old))
    return episode


def _calibration(agent, action, days_old, episode=None):
    row = CalibrationRecord.objects.create(
        agent=agent, action=action, window_days=30, sample_count=0, buckets=[], episode=episode
    )
    CalibrationRecord.objects.filter(pk=row.pk).update(computed_at=_ago(days_old))
    return row


def test_old_episodes_and_superseded_calibrations_go_and_what_is_still_read_stays(monkeypatch):
    monkeypatch.setattr(db, "PURGE_BATCH", 2)
    agent, other = Agent.objects.create(name="mailer"), Agent.objects.create(name="idle")
    send, pay = Action.objects.create(name="email.send"), Action.objects.create(name="pay.out")
    old = [_episode(agent, 120) for _ in range(4)]
    named = _episode(agent, 200)
    AutonomyTransition.objects.create(action=send, from_level=1, to_level=2, evidence={}, episode=named)
    recent = _episode(agent, 10)

    superseded = [_calibration(agent, send, 150, old[0]), _calibration(agent, send, 120), _calibration(agent, None, 130)]
    latest_old = [
        _calibration(agent, pay, 100),  # pay.out's latest, however old: consult reads it
        _calibration(other, None, 300),  # the idle agent's only overall record
    ]
    kept = [_calibration(agent, send, 5), _calibration(agent, None, 5), *latest_old]

    with pytest.raises(ApplicationError, match="must be 1 to 36500 days"):
        autonomy_history_purge(days=0)
    assert autonomy_history_purge_task() == {"episodes": 4, "calibration_records": len(superseded)}
    assert set(Episode.objects.values_list("pk", flat=True)) == {named.pk, recent.pk}
    assert EpisodeEvent.objects.count() == 4  # the two episodes' own events
    assert set(CalibrationRecord.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    assert autonomy_history_purge() == {"episodes": 0, "calibration_records": 0}
