"""Reads of bulk imports that run as jobs."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from common.api import NotFound
from learning.models import PhraseImportJob
from tenants.context import acting_agent_id, private_agent_id

# The largest id a job's key (a PostgreSQL bigint) can hold.
IMPORT_JOB_ID_MAX = 2**63 - 1


def phrase_import_job_get(*, job_id: int) -> PhraseImportJob:
    """The import job with this id, without its rows (404 when there is none or the caller may not read it: another
    tenant's, by the manager and row-level security; for an agent's key, one its owner did not send: an agent with
    private user data reads only its own, any other agent only those of the shared agents)."""
    if not 0 < job_id <= IMPORT_JOB_ID_MAX:
        raise NotFound(f"No import job {job_id}.", field="id")
    jobs = PhraseImportJob.objects.defer("rows")
    if acting_agent_id() is not None:  # an agent's key: its owner's jobs (a reviewer reads the tenant's)
        private = private_agent_id()
        jobs = jobs.filter(Q(private_agent__isnull=True) if private is None else Q(private_agent_id=private))
    job = jobs.filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"No import job {job_id}.", field="id")
    return job


def phrase_import_jobs_unrun(*, limit: int = 100) -> list[tuple[int, int]]:
    """(id, tenant id) of the import jobs nobody is running, oldest first: queued for longer than
    LEARNING_IMPORT_JOB_SEND_WAIT_S (the broker refused or lost the task that runs it, or no worker took it), or
    running for longer than LEARNING_IMPORT_JOB_STALE_S (its worker died: nothing of its import committed)."""
    now = timezone.now()
    unsent = Q(
        status=PhraseImportJob.Status.QUEUED, created_at__lt=now - timedelta(seconds=settings.LEARNING_IMPORT_JOB_SEND_WAIT_S)
    )
    dead = Q(status=PhraseImportJob.Status.RUNNING, started_at__lt=now - timedelta(seconds=settings.LEARNING_IMPORT_JOB_STALE_S))
    return list(PhraseImportJob.objects.filter(unsent | dead).order_by("created_at", "id").values_list("id", "tenant_id")[:limit])
