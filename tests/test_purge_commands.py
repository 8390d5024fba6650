"""The purges the daily beat runs, as commands an operator can run now: a dry run counts what would go and deletes
nothing, a run deletes it, and a bad age stops the command with a message naming the option."""

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from autonomy.models import Episode
from learning.models import PhraseBlock, ResolutionRecord
from learning.services.blocks import phrase_block_add

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def _old_records(n, days=200):
    for i in range(n):
        ResolutionRecord.objects.create(
            request_id=uuid.uuid4(), text=f"t{i}", normalized=f"t{i}", outcome="resolved", rule="fixed"
        )
    ResolutionRecord.objects.update(created_at=timezone.now() - timedelta(days=days))


def test_resolution_records_dry_run_counts_and_run_deletes():
    _old_records(3)
    ResolutionRecord.objects.create(request_id=uuid.uuid4(), text="new", normalized="new", outcome="resolved", rule="fixed")
    assert "would delete 3" in run("purge_resolution_records", "--dry-run")
    assert ResolutionRecord.objects.count() == 4
    assert "would delete 0" in run("purge_resolution_records", "--dry-run", "--older-than", "365d")
    assert "deleted 3" in run("purge_resolution_records")
    assert list(ResolutionRecord.objects.values_list("text", flat=True)) == ["new"]


def test_the_audit_trail_dry_run_counts_and_run_deletes(catalogue):
    block, _ = phrase_block_add(phrase="drop a cbu", verb_name="cbu.delete")
    block.delete()  # its trail: created, deleted
    trail = PhraseBlock.history.model.objects
    trail.update(history_date=timezone.now() - timedelta(days=400))
    before = trail.count()
    assert "Audit trail: would delete" in run("purge_history", "--dry-run") and trail.count() == before
    out = run("purge_history")
    assert "learning_historicalphraseblock: 2" in out and not trail.filter(id=block.pk).exists()


def test_autonomy_history_dry_run_counts_and_run_deletes():
    Episode.objects.create()
    Episode.objects.update(started_at=timezone.now() - timedelta(days=400))
    assert "would delete 1 episode(s)" in run("purge_autonomy_history", "--dry-run") and Episode.objects.count() == 1
    assert "deleted 1 episode(s)" in run("purge_autonomy_history")
    assert not Episode.objects.exists()


@pytest.mark.parametrize("command", ["purge_history", "purge_resolution_records", "purge_autonomy_history"])
@pytest.mark.parametrize("value", ["0", "-3", "abc", "36501", "99999999999", "12h", ""])
def test_a_bad_age_stops_the_command_naming_the_option(command, value):
    _old_records(1)
    with pytest.raises(CommandError, match="--older-than takes days from 1 to 36500"):
        run(command, "--older-than", value)
    assert ResolutionRecord.objects.count() == 1
