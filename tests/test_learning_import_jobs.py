"""Large API imports run as jobs on a worker: 202, a status to poll, the same tenant and agent as the request."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.authentication import verified_keys_forget
from learning.models import LearnedPhrase, PhraseImportJob
from learning.resolution import resolve
from learning.services.imports import phrase_import_job_run
from learning.tasks import phrase_import_job_run_task
from tenants.services import tenant_create
from tests.conftest import make_client

GOOD = [
    {"phrase": "spin up a client unit", "verb": "cbu.create"},
    {"phrase": "show every client unit", "verb": "cbu.list"},
    {"phrase": "look for a contract", "verb": "document.search"},
]
IMPORT = "/api/v1/learning/import"


@pytest.fixture
def small_sync(settings):
    """Imports of more than two rows run as jobs."""
    settings.LEARNING_IMPORT_SYNC_MAX_ROWS = 2


def post(client, rows, **body):
    body = {"format": "json", "content": json.dumps(rows), **body}
    key = body.pop("key", None)
    return client.post(IMPORT, body, format="json", **({"HTTP_IDEMPOTENCY_KEY": key} if key else {}))


def job_of(response) -> dict:
    assert response.status_code == 202, response.content
    job = response.json()["job"]
    assert response["Location"] == f"/api/v1/learning/imports/{job['id']}"
    return job


def test_a_large_import_answers_202_and_the_job_imports_every_row(gov_api, catalogue, small_sync, run_tasks):
    r = run_tasks(post, gov_api, GOOD)
    job = job_of(r)
    assert job["status"] == "queued" and job["rows"] == 3 and job["scope"] == "global" and job["result"] is None

    polled = gov_api.get(r["Location"])
    assert polled.status_code == 200, polled.content
    body = polled.json()
    assert body["status"] == "succeeded", body
    assert (body["result"]["imported"], body["result"]["updated"], body["result"]["unchanged"]) == (3, 0, 0)
    assert body["errors"] == [] and body["error_code"] == ""
    assert body["started_at"] and body["finished_at"] and body["finished_at"] >= body["started_at"]

    assert LearnedPhrase.objects.filter(user_id__isnull=True, embedding__isnull=False).count() == 3
    assert resolve(text="spin up a client unit").verb == "cbu.create"
    stored = PhraseImportJob.objects.get(pk=job["id"])
    assert stored.rows == [] and stored.agent_id == gov_api.agent.pk and stored.source == "import:reviewer-tool"


def test_a_job_with_a_bad_row_fails_naming_it_and_stores_nothing(gov_api, catalogue, small_sync, run_tasks):
    rows = GOOD + [{"phrase": "do a thing", "verb": "cbu.nope"}]
    job = job_of(run_tasks(post, gov_api, rows))
    body = gov_api.get(f"/api/v1/learning/imports/{job['id']}").json()
    assert body["status"] == "failed" and body["error_code"] == "import_invalid" and body["result"] is None
    assert [(e["row"], e["field"]) for e in body["errors"]] == [(4, "verb")]
    assert "cbu.nope" in body["errors"][0]["reason"] and "nothing was imported" in body["error_detail"]
    assert body["finished_at"]
    assert not LearnedPhrase.objects.exists()


def test_an_unexpected_failure_is_stored_with_its_class_and_logged(
    gov_api, catalogue, small_sync, run_tasks, monkeypatch, caplog
):
    def broken(**kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr("learning.services.imports.phrases_import", broken)
    job = job_of(run_tasks(post, gov_api, GOOD))
    body = gov_api.get(f"/api/v1/learning/imports/{job['id']}").json()
    assert body["status"] == "failed" and body["error_code"] == "error"
    assert body["error_detail"] == "RuntimeError: the disk is full"
    assert any("import job" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_second_run_of_a_finished_job_changes_nothing(gov_api, catalogue, small_sync, run_tasks):
    job_id = job_of(run_tasks(post, gov_api, GOOD))["id"]
    done = PhraseImportJob.objects.get(pk=job_id)
    assert done.status == "succeeded"
    phrases = sorted(LearnedPhrase.objects.values_list("pk", "updated_at"))
    history = LearnedPhrase.history.count()

    assert phrase_import_job_run_task.apply(args=[job_id]).get() is None  # a redelivered task
    assert phrase_import_job_run(job_id=job_id) is None
    again = PhraseImportJob.objects.get(pk=job_id)
    assert (again.status, again.started_at, again.finished_at, again.result) == (
        done.status,
        done.started_at,
        done.finished_at,
        done.result,
    )
    assert sorted(LearnedPhrase.objects.values_list("pk", "updated_at")) == phrases
    assert LearnedPhrase.history.count() == history


def test_a_running_job_is_left_alone_until_it_is_stale(gov_api, catalogue, small_sync, settings):
    job_id = job_of(post(gov_api, GOOD))["id"]  # its task is not run: the test's transaction never commits
    started = timezone.now() - timedelta(seconds=60)
    PhraseImportJob.objects.filter(pk=job_id).update(status="running", started_at=started)
    assert phrase_import_job_run(job_id=job_id) is None
    assert PhraseImportJob.objects.get(pk=job_id).status == "running" and not LearnedPhrase.objects.exists()

    settings.LEARNING_IMPORT_JOB_STALE_S = 30  # its worker died: nothing of its import committed
    job = phrase_import_job_run(job_id=job_id)
    assert job.status == "succeeded" and job.started_at > started and job.result["imported"] == 3
    assert LearnedPhrase.objects.count() == 3


def test_background_makes_a_job_of_a_small_import_and_runs_as_the_private_agent(db, catalogue, run_tasks):
    client = make_client(["governance"], name="private-tool")
    client.agent.private_user_data = True
    client.agent.save()
    verified_keys_forget()
    rows = [{"phrase": "show my client units", "verb": "cbu.list"}]
    job = job_of(run_tasks(post, client, rows, scope="user", user_id="alice", background=True))
    assert job["scope"] == "user" and job["user_id"] == "alice"
    assert client.get(f"/api/v1/learning/imports/{job['id']}").json()["status"] == "succeeded"
    phrase = LearnedPhrase.objects.get(normalized="show my client units")
    assert (phrase.user_id, phrase.private_agent_id) == ("alice", client.agent.pk)
    assert PhraseImportJob.objects.get(pk=job["id"]).private_agent_id == client.agent.pk


def test_another_tenant_and_another_private_agent_get_404(gov_api, catalogue, small_sync):
    shared = job_of(post(gov_api, GOOD))["id"]
    private_client = make_client(["governance"], name="private-tool")
    private_client.agent.private_user_data = True
    private_client.agent.save()
    verified_keys_forget()
    private = job_of(post(private_client, GOOD))["id"]
    other = make_client(["governance"], name="other-tool")
    foreign = make_client(["governance"], name="globex-tool", tenant=tenant_create(slug="globex"))

    def status(client, job_id):
        return client.get(f"/api/v1/learning/imports/{job_id}").status_code

    assert status(other, shared) == 200
    assert status(private_client, shared) == 404  # it reads only the user data it wrote itself
    assert status(private_client, private) == 200
    assert status(other, private) == status(gov_api, private) == 404  # another agent of the tenant
    assert status(foreign, shared) == status(foreign, private) == status(foreign, 99_999_999) == 404
    assert status(gov_api, 2**63) == 404  # no key holds it
    resolve_only = make_client(["resolve"], name="resolver")
    assert status(resolve_only, shared) == 403


def test_small_imports_and_dry_runs_answer_at_once_and_make_no_job(gov_api, catalogue, small_sync):
    small = post(gov_api, GOOD[:2])
    assert small.status_code == 200, small.content
    assert small.json()["imported"] == 2 and "Location" not in small
    dry = post(gov_api, GOOD, dry_run=True)
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    dry_background = post(gov_api, GOOD, dry_run=True, background=True)
    assert dry_background.status_code == 200 and sorted(dry_background.json()["would_add"]) == ["look for a contract"]
    assert not PhraseImportJob.objects.exists()
    assert LearnedPhrase.objects.count() == 2


def test_unreadable_files_and_too_many_rows_are_400_before_any_job(gov_api, catalogue, small_sync, settings):
    broken = gov_api.post(IMPORT, {"format": "json", "content": "[{"}, format="json")
    assert broken.status_code == 400 and broken.json()["code"] == "import_unreadable"
    settings.LEARNING_IMPORT_MAX_ROWS = 2
    many = post(gov_api, GOOD)
    assert many.status_code == 400 and "LEARNING_IMPORT_MAX_ROWS" in many.json()["detail"]
    assert not PhraseImportJob.objects.exists()


def test_a_retried_post_with_its_key_answers_the_same_202_and_makes_one_job(gov_api, catalogue, small_sync):
    first = post(gov_api, GOOD, key="import-1")
    job = job_of(first)
    again = post(gov_api, GOOD, key="import-1")
    assert again["Idempotent-Replayed"] == "true"
    assert job_of(again) == job and again["Location"] == first["Location"]
    assert PhraseImportJob.objects.count() == 1


def test_the_schema_documents_the_202_and_the_job(gov_api):
    paths = gov_api.get("/api/schema/", {"format": "json"}).json()["paths"]
    assert {"200", "202", "400"} <= set(paths["/api/v1/learning/import"]["post"]["responses"])
    assert {"200", "404"} <= set(paths["/api/v1/learning/imports/{job_id}"]["get"]["responses"])


def _queued_job(client, rows, **body):
    """A job whose task never ran (the broker refused or lost it): posted without running on-commit callbacks."""
    return PhraseImportJob.objects.get(pk=job_of(post(client, rows, **body))["id"])


def test_the_sweep_runs_a_job_whose_task_was_lost_and_one_whose_worker_died(gov_api, catalogue, small_sync, settings):
    from learning.tasks import phrase_import_jobs_sweep_task

    lost = _queued_job(gov_api, GOOD)
    fresh = _queued_job(gov_api, [{"phrase": "remove a client unit", "verb": "cbu.delete"}], background=True)
    dead = _queued_job(gov_api, [{"phrase": "list client units please", "verb": "cbu.list"}], background=True)
    long_ago = timezone.now() - timedelta(seconds=settings.LEARNING_IMPORT_JOB_SEND_WAIT_S + 5)
    PhraseImportJob.objects.filter(pk=lost.pk).update(created_at=long_ago)
    stale = timezone.now() - timedelta(seconds=settings.LEARNING_IMPORT_JOB_STALE_S + 5)
    PhraseImportJob.objects.filter(pk=dead.pk).update(status="running", started_at=stale, created_at=long_ago)

    assert phrase_import_jobs_sweep_task() == {lost.pk: "succeeded", dead.pk: "succeeded"}
    assert PhraseImportJob.objects.get(pk=fresh.pk).status == "queued"  # its task may still be on its way
    assert resolve(text="spin up a client unit").verb == "cbu.create"
    assert LearnedPhrase.objects.filter(normalized="list client units please").exists()
    assert phrase_import_jobs_sweep_task() == {}  # nothing left to run


def test_jobs_that_ended_past_the_retention_are_purged(gov_api, catalogue, small_sync, run_tasks, settings):
    from learning.tasks import resolution_records_purge_task

    old = PhraseImportJob.objects.get(pk=job_of(run_tasks(post, gov_api, GOOD))["id"])
    recent = PhraseImportJob.objects.get(pk=job_of(run_tasks(post, gov_api, GOOD))["id"])
    waiting = _queued_job(gov_api, GOOD)
    past = timezone.now() - timedelta(days=settings.RESOLUTION_RETENTION_DAYS + 1)
    PhraseImportJob.objects.filter(pk__in=[old.pk, waiting.pk]).update(finished_at=past, created_at=past)

    assert resolution_records_purge_task()["import_jobs"] == 1
    assert set(PhraseImportJob.objects.values_list("pk", flat=True)) == {recent.pk, waiting.pk}  # never one not run


def test_a_users_erasure_deletes_their_import_jobs(gov_api, catalogue, small_sync):
    from privacy.services import user_data_erase
    from tenants.context import tenant_scope

    theirs = _queued_job(gov_api, GOOD, scope="user", user_id="alice")
    other = _queued_job(gov_api, GOOD, scope="user", user_id="bob")
    shared = _queued_job(gov_api, GOOD)
    with tenant_scope([theirs.tenant_id]):
        out = user_data_erase(user_id="alice")
    assert out["rows"]["learning_phraseimportjob"] == 1
    assert set(PhraseImportJob.objects.values_list("pk", flat=True)) == {other.pk, shared.pk}
    assert phrase_import_job_run(job_id=theirs.pk) is None  # its task arriving later imports nothing
    assert not LearnedPhrase.objects.filter(user_id="alice").exists()


def _elsewhere(fn):
    """``fn`` in another thread, on its own connection, committed when it returns (another process's write)."""
    import threading

    from django.db import connection

    out = {}

    def run():
        try:
            out["value"] = fn()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    return out.get("value")


@pytest.mark.django_db(transaction=True)
def test_a_users_erasure_while_their_job_embeds_leaves_nothing_of_theirs(gov_api, catalogue, small_sync, monkeypatch):
    """The job reads its rows, then embeds them for minutes before its write transaction: an erasure of the user
    that commits meanwhile deleted the job; the import then writes nothing."""
    from learning.services import imports
    from privacy.services import user_data_erase

    monkeypatch.setattr(imports, "task_send_on_commit", lambda *a, **k: None)  # its task is on its way
    job = _queued_job(gov_api, GOOD, scope="user", user_id="alice")
    real = imports.embeddings_by_text

    def embed_then_erase(**kwargs):
        out = real(**kwargs)
        tenant = PhraseImportJob.objects.get(pk=job.pk).tenant_id

        def erase():
            from tenants.context import tenant_scope

            with tenant_scope([tenant]):
                return user_data_erase(user_id="alice")

        assert _elsewhere(erase)["rows"]["learning_phraseimportjob"] == 1
        return out

    monkeypatch.setattr(imports, "embeddings_by_text", embed_then_erase)
    assert phrase_import_job_run(job_id=job.pk) is None
    assert not LearnedPhrase.objects.filter(user_id="alice").exists()
    assert not PhraseImportJob.objects.filter(pk=job.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_stale_claim_was_taken_over_writes_nothing(gov_api, catalogue, small_sync, monkeypatch, settings):
    """A job still running past LEARNING_IMPORT_JOB_STALE_S is claimed again (the sweep); the first run, still
    alive, then finds the claim is no longer its own and writes nothing; the second imports once."""
    from learning.services import imports

    monkeypatch.setattr(imports, "task_send_on_commit", lambda *a, **k: None)  # its task is on its way
    job = _queued_job(gov_api, GOOD)
    real = imports.embeddings_by_text
    second = {}

    def embed_then_taken_over(**kwargs):
        out = real(**kwargs)
        if not second:
            stale = timezone.now() - timedelta(seconds=settings.LEARNING_IMPORT_JOB_STALE_S + 5)
            PhraseImportJob.objects.filter(pk=job.pk).update(started_at=stale)
            tenant = PhraseImportJob.objects.get(pk=job.pk).tenant_id

            def sweep():
                from tenants.context import tenant_scope

                with tenant_scope([tenant]):
                    return phrase_import_job_run(job_id=job.pk)

            second["job"] = "running"
            second["job"] = _elsewhere(sweep)  # the sweep, meanwhile, in another worker
        return out

    monkeypatch.setattr(imports, "embeddings_by_text", embed_then_taken_over)
    assert phrase_import_job_run(job_id=job.pk) is None  # the first run: abandoned
    assert second["job"].status == "succeeded" and second["job"].result["imported"] == 3
    assert LearnedPhrase.objects.filter(user_id__isnull=True).count() == 3


def test_mcp_import_of_many_rows_is_a_job_read_with_get_import_job(gov_api, catalogue, small_sync, run_tasks):
    """The MCP tool makes the same job as REST's 202, and another tool reads it."""
    from tests.test_mcp_policies import mcp_call

    content = json.dumps(GOOD)
    started = run_tasks(mcp_call, "import_phrases", gov_api.raw, {"format": "json", "content": content, "dry_run": False})
    assert started.error is None, started
    job = started.data["job"]
    assert job["rows"] == 3 and job["status"] == "queued"
    polled = mcp_call("get_import_job", gov_api.raw, {"job_id": job["id"]})
    assert polled.error is None and polled.data["status"] == "succeeded" and polled.data["result"]["imported"] == 3
    missing = mcp_call("get_import_job", gov_api.raw, {"job_id": 99_999_999})
    assert missing.error is not None and missing.error["code"] == "not_found", missing


def test_the_admin_lists_jobs_and_shows_one_without_its_rows(gov_api, catalogue, small_sync):
    from tests.conftest import reviewer_user
    from tests.test_review_inbox import signed_in

    job = _queued_job(gov_api, GOOD)
    root = signed_in(reviewer_user("root", superuser=True))
    listed = root.get("/admin/learning/phraseimportjob/")
    assert listed.status_code == 200 and f"/admin/learning/phraseimportjob/{job.pk}/change/" in listed.content.decode()
    shown = root.get(f"/admin/learning/phraseimportjob/{job.pk}/change/")
    assert shown.status_code == 200
    page = shown.content.decode()
    assert "queued" in page and "spin up a client unit" not in page  # the rows stay out of the page
    assert root.get("/admin/learning/phraseimportjob/add/").status_code == 403
