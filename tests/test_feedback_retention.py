"""Retention: old feedback records move to the archive in batches; patterns keep their counts; admin and CSV."""

import csv
import io
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.services import autonomy_cycle_run
from feedback.models import FeedbackRecord, FeedbackRecordArchive, MistakePattern
from feedback.services.retention import feedback_records_archive
from feedback.tasks import feedback_archive_records


def make_records(agent, action, n_old=25, n_new=5, old_days=200):
    FeedbackRecord.objects.bulk_create(
        [
            FeedbackRecord(
                agent=agent,
                action=action,
                feedback_type="rejection",
                human_explanation=f"said {i}",
                corrected_action={"to": i} if i % 2 else None,
                mistake_category="tone",
                source="api",
            )
            for i in range(n_old + n_new)
        ]
    )
    ids = list(FeedbackRecord.objects.order_by("id").values_list("id", flat=True))
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE feedback_feedbackrecord SET created_at = now() - %s * interval '1 day' WHERE id = ANY(%s)",
            [old_days, ids[:n_old]],
        )
    return ids[:n_old], ids[n_old:]


@pytest.mark.django_db
def test_old_records_move_to_the_archive_in_batches_and_patterns_keep_their_counts():
    agent = Agent.objects.create(name="keeper")
    action = Action.objects.create(name="email.send")
    old, new = make_records(agent, action)
    autonomy_cycle_run(agent_id=agent.pk)  # the 5 recent rejections make a pattern (the old ones are outside the window)
    pattern = MistakePattern.objects.get(agent=agent)
    assert pattern.occurrence_count == 5
    FeedbackRecord.objects.filter(pk__in=old).update(pattern=pattern)  # old records linked to it too
    before = {r["id"]: r for r in FeedbackRecord.objects.filter(pk__in=old).values()}

    result = feedback_records_archive(older_than_days=180, batch_size=10)
    assert (result.archived, result.batches) == (25, 3)
    assert sorted(FeedbackRecord.objects.values_list("id", flat=True)) == new
    archived = {r["id"]: r for r in FeedbackRecordArchive.objects.values()}
    assert sorted(archived) == old
    for pk, row in before.items():  # every column kept, the id too
        got = dict(archived[pk])
        assert got.pop("archived_at") is not None
        assert got == row
    # patterns keep their counts and a new cycle does not change them
    autonomy_cycle_run(agent_id=agent.pk)
    pattern.refresh_from_db()
    assert pattern.occurrence_count == 5
    # idempotent: nothing left to move
    assert feedback_records_archive(older_than_days=180).archived == 0


@pytest.mark.django_db
def test_the_command_dry_run_and_task():
    agent = Agent.objects.create(name="cmd")
    action = Action.objects.create(name="crm.update")
    make_records(agent, action, n_old=7, n_new=2, old_days=100)
    out = StringIO()
    call_command("archive_feedback_records", "--older-than", "90d", "--dry-run", stdout=out)
    assert "7 feedback record(s)" in out.getvalue() and FeedbackRecordArchive.objects.count() == 0
    out = StringIO()
    call_command("archive_feedback_records", "--older-than", "180d", stdout=out)
    assert "0 feedback record(s)" in out.getvalue()
    out = StringIO()
    call_command("archive_feedback_records", "--older-than", "90d", "--batch", "3", stdout=out)
    assert "7 feedback record(s)" in out.getvalue() and "3 batch(es)" in out.getvalue()
    assert FeedbackRecordArchive.objects.count() == 7 and FeedbackRecord.objects.count() == 2
    with pytest.raises(CommandError):  # inside the mistake window: would lower pattern counts
        call_command("archive_feedback_records", "--older-than", "10d")
    with pytest.raises(CommandError):
        call_command("archive_feedback_records", "--older-than", "soon")
    with pytest.raises(CommandError):  # digits of another script are not read as a number of days
        call_command("archive_feedback_records", "--older-than", "\u0663\u0660\u0660")
    FeedbackRecord.objects.update(created_at=timezone.now() - timedelta(days=settings.FEEDBACK_RECORD_RETENTION_DAYS + 1))
    assert feedback_archive_records.apply().get() == 2
    entry = settings.CELERY_BEAT_SCHEDULE["feedback-archive-records"]
    assert entry["task"] == feedback_archive_records.name and entry["schedule"] > 0


@pytest.mark.django_db
def test_admin_lists_the_archive_read_only_and_exports_csv(admin_client):
    agent = Agent.objects.create(name="adm")
    action = Action.objects.create(name="doc.send")
    old, _ = make_records(agent, action, n_old=4, n_new=1)
    feedback_records_archive(older_than_days=180)
    url = reverse("admin:feedback_feedbackrecordarchive_changelist")
    page = admin_client.get(url)
    assert page.status_code == 200 and "doc.send" in page.content.decode()
    assert admin_client.get(reverse("admin:feedback_feedbackrecordarchive_add")).status_code == 403
    detail = admin_client.get(reverse("admin:feedback_feedbackrecordarchive_change", args=[old[0]]))
    assert detail.status_code == 200 and "said 0" in detail.content.decode()

    export = admin_client.get(reverse("admin:feedback_feedbackrecordarchive_export"), {"feedback_type": "rejection"})
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert [int(r["id"]) for r in rows] == old and rows[1]["corrected_action"] == '{"to": 1}'
    response = admin_client.post(url, {"action": "export_csv", "_selected_action": [str(old[0])]})
    assert response.status_code == 200
    assert len(list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))) == 2


@pytest.mark.django_db(transaction=True)
def test_both_csv_exports_read_the_reviewers_rows_in_a_web_process():
    """A web process's connection sees no tenant outside a request's scope (config/wsgi.py), and the server reads a
    streamed answer after the request's scope ended: the rows are read in the reviewer's scope again."""
    from django.test import Client

    from tests.conftest import reviewer_user

    agent, action = Agent.objects.create(name="adm"), Action.objects.create(name="doc.send")
    old, _ = make_records(agent, action, n_old=4, n_new=1)
    feedback_records_archive(older_than_days=180)
    client = Client()
    client.force_login(reviewer_user("root", superuser=True))
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('app.tenant_ids', 'none', false)")
    try:
        export = client.get("/admin/feedback/feedbackrecordarchive/export-csv/")
        rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
        chosen = client.post(
            "/admin/feedback/feedbackrecordarchive/", {"action": "export_csv", "_selected_action": [str(old[0])]}
        )
        picked = list(csv.DictReader(io.StringIO(b"".join(chosen.streaming_content).decode())))
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('app.tenant_ids', '*', false)")
    assert [int(r["id"]) for r in rows] == old
    assert [int(r["id"]) for r in picked] == [old[0]]


@pytest.mark.django_db
def test_the_periodic_archive_moves_batches_without_counting_the_backlog_first():
    """The count of every old record is for a dry run (and the command's progress bar); the periodic task only
    moves batches."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from feedback.services.retention import feedback_records_archive

    with CaptureQueriesContext(connection) as seen:
        assert feedback_records_archive().archived == 0
    counts = [q["sql"] for q in seen.captured_queries if q["sql"].upper().startswith('SELECT COUNT(*) AS "__COUNT"')]
    assert counts == []  # the batch statement counts what it moved, nothing counts the backlog
    assert feedback_records_archive(dry_run=True).archived == 0
