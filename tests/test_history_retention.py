"""The audit trail does not grow forever: past HISTORY_RETENTION_DAYS each object keeps only its latest change, and
an object deleted before then leaves no trail (a deleted memory's text does not live on in its history)."""

import pytest
from django.utils import timezone

from common import db
from common.api import ApplicationError
from common.retention import history_purge
from common.tasks import history_purge_task
from learning.models import LearnedPhrase, Verb
from memories.models import Memory

pytestmark = pytest.mark.django_db


def _age(rows, days: float) -> None:
    """Date these historical rows ``days`` ago."""
    type(rows[0]).objects.filter(pk__in=[r.pk for r in rows]).update(history_date=timezone.now() - timezone.timedelta(days=days))


def _memory(content: str) -> Memory:
    return Memory.objects.create(user_id="u1", content=content, simhash="0" * 16, content_sha256="0" * 64)


def _changes(phrase: LearnedPhrase, n: int) -> None:
    for i in range(n):
        phrase.confidence = 0.5 + i / 100
        phrase.save()


def test_old_changes_go_but_each_live_objects_latest_and_recent_changes_stay(monkeypatch, settings):
    monkeypatch.setattr(db, "PURGE_BATCH", 2)
    settings.HISTORY_RETENTION_DAYS = 30
    verb = Verb.objects.create(name="cards.freeze", display_name="Freeze card")
    old = LearnedPhrase.objects.create(phrase="lock my card", normalized="lock my card", verb=verb)
    _changes(old, 4)
    _age(list(old.history.all()), 60)  # created and changed four times, all two months ago
    mixed = LearnedPhrase.objects.create(phrase="freeze it", normalized="freeze it", verb=verb)
    _changes(mixed, 2)
    _age(list(mixed.history.order_by("history_date", "history_id")[:1]), 60)  # created long ago, changed twice lately

    gone = _memory("my locker is the third from the left")
    gone_trail = list(gone.history.all())
    gone.delete()
    _age(list(Memory.history.filter(id=gone_trail[0].id)), 45)
    recently_gone = _memory("prefers email")
    recently_gone_id = recently_gone.pk
    recently_gone.delete()  # within the retention: its trail stays

    deleted = history_purge_task()

    assert list(old.history.values_list("confidence", flat=True)) == [old.confidence]  # the latest only
    assert mixed.history.count() == 2  # the recent changes

    assert not Memory.history.filter(id=gone_trail[0].id).exists()
    assert Memory.history.filter(id=recently_gone_id).count() == 2
    assert deleted == {
        LearnedPhrase.history.model._meta.db_table: 4 + 1,
        Memory.history.model._meta.db_table: 2,
    }
    assert verb.history.count() == 1  # recent
    assert history_purge() == {}  # nothing left to purge


def test_a_row_older_than_the_retention_that_is_an_objects_only_record_stays():
    verb = Verb.objects.create(name="cards.order", display_name="Order card")
    _age(list(verb.history.all()), 4000)
    assert history_purge(days=1) == {}
    assert verb.history.count() == 1


def test_a_retention_below_a_day_is_refused_and_nothing_is_deleted():
    verb = Verb.objects.create(name="cards.cancel", display_name="Cancel card")
    verb.display_name = "Cancel a card"
    verb.save()
    _age(list(verb.history.all()), 10)
    with pytest.raises(ApplicationError, match="must be 1 to 36500 days"):
        history_purge(days=0)
    assert verb.history.count() == 2
