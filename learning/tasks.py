"""Celery tasks of the learning app."""

import logging

from celery import shared_task

from learning.services.blocks import phrase_blocks_purge_expired
from learning.services.decisions import decision_prior_fit, decision_prior_refresh, decision_refit, resolution_records_purge
from learning.services.disambiguations import (
    disambiguation_signals_process,
    disambiguation_signals_sweep,
    disambiguations_expire,
    disambiguations_purge,
)
from learning.services.imports import phrase_import_job_run, phrase_import_jobs_purge
from learning.services.indexes import learned_phrase_tenant_indexes_sync
from tenants.context import tenant_filter_ids, tenant_session
from tenants.selectors import tenant_ids_all

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True, one_transaction=False)
def purge_expired_blocks_task() -> int:
    """Periodic: delete expired blocklist entries (they stopped applying at expiry already)."""

    count = phrase_blocks_purge_expired()
    logger.info("purged %d expired blocklist entries", count)
    return count


# Disambiguation requests: learning from answers, expiring stale ones.


# --- Disambiguation feedback loop ---


@shared_task(
    name="learning.disambiguation_signals_process",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(ConnectionError,),
    max_retries=3,
)
def disambiguation_signals_process_task(request_pk: int) -> dict:
    """Learn from one disambiguation's signals (idempotent: a second run does nothing)."""

    return disambiguation_signals_process(request_pk=request_pk)


@shared_task(name="learning.disambiguation_signals_sweep", ignore_result=True, one_transaction=False)
def disambiguation_signals_sweep_task() -> dict:
    """Learn from answers whose signal task never ran or failed (beat: every FEEDBACK_SIGNAL_SWEEP_EVERY_S)."""

    return disambiguation_signals_sweep()


@shared_task(name="learning.disambiguations_expire", ignore_result=True)
def disambiguations_expire_task() -> int:
    """Mark stale open disambiguation requests ``expired`` (beat: every minute)."""

    return disambiguations_expire()


# --- Bulk imports sent through the API ---


@shared_task(name="learning.phrase_import_job_run", acks_late=True, ignore_result=True, one_transaction=False)
def phrase_import_job_run_task(job_id: int) -> str | None:
    """Run one import job in its sender's tenant and as its agent (its own transactions: the claim, the import,
    the outcome); a redelivery of a job that runs or ended does nothing. Answers the job's status."""

    job = phrase_import_job_run(job_id=job_id)
    return job.status if job is not None else None


@shared_task(name="learning.phrase_import_jobs_sweep", ignore_result=True, one_transaction=False)
def phrase_import_jobs_sweep_task() -> dict:
    """Periodic: run here the import jobs nobody runs (``phrase_import_jobs_unrun``: a task the broker refused or
    lost, a worker that died), each in its tenant's scope; answers {job id: status}."""
    from learning.selectors import phrase_import_jobs_unrun

    out = {}
    for job_id, tenant_id in phrase_import_jobs_unrun():
        try:
            with tenant_session([tenant_id]):
                job = phrase_import_job_run(job_id=job_id)
            out[job_id] = job.status if job is not None else None
        except Exception:
            logger.exception("import job %s: the sweep could not run it", job_id)
            out[job_id] = "error"
    return out


# --- The learned auto-resolve decision ---


# The decision fits train for minutes on a large deployment: they run in their tenant's scope without one
# transaction around them (tenant_session); each stores its fit in a short transaction of its own.


@shared_task(name="learning.decision_refit", ignore_result=True, one_transaction=False)
def decision_refit_task(force: bool = False, due: bool = False) -> dict:
    """Promote the shadow decision fit if it earned it, refit on the newest labels (beat: daily; also sent every
    RESOLVE_REFIT_EVERY_LABELS labels, ``due``: skipped when another refit fitted them meanwhile)."""

    return _per_tenant("decision refit", lambda: decision_refit(force=force, due=due))


def _each_tenant(name: str, work, tenant_ids=None) -> dict:
    """``work()`` in each tenant's scope (``tenant_session``: the work's own transactions), every tenant's or those of
    ``tenant_ids``; one tenant's failure is logged and answered as "error", and the others still run."""
    out = {}
    for tenant_id in tenant_ids_all() if tenant_ids is None else tenant_ids:
        try:
            with tenant_session([tenant_id]):
                out[tenant_id] = work()
        except Exception:
            logger.exception("tenant %s: %s failed", tenant_id, name)
            out[tenant_id] = "error"
    return out


def _per_tenant(name: str, work):
    """``work()`` once per tenant the task was sent for: in the sender's one tenant (a request's), in each of its
    tenants when it had several (a reviewer of several tenants in the admin: a fit belongs to one tenant, and
    reads one tenant's phrases), in every tenant when it had none (the beat)."""
    scoped = tenant_filter_ids()
    if scoped is not None and len(scoped) == 1:
        return work()
    return _each_tenant(name, work, tenant_ids=scoped)


@shared_task(name="learning.decision_prior_fit", ignore_result=True, one_transaction=False)
def decision_prior_fit_task(changed_at: float | None = None) -> int | None | dict:
    """Refit the catalogue prior and the retrieval floors of the sending tenant (sent when its catalogue or its
    global phrases change): the new version, or None when the catalogue is too small for a prior or a newer fit
    read the change (``changed_at``, the database's clock when it committed) already. Sent with no tenant in
    scope: every tenant's, each on its own phrases."""

    def fit_one():
        fit = decision_prior_fit(changed_at=changed_at)
        return fit.version if fit else None

    return _per_tenant("catalogue prior", fit_one)


@shared_task(name="learning.decision_prior_refresh", ignore_result=True, one_transaction=False)
def decision_prior_refresh_task() -> int | None | dict:
    """Periodic (RESOLVE_PRIOR_CHECK_S): each tenant's catalogue prior again once a change of embedding model has
    been re-embedded (``decision_prior_refresh``): the new version, or None."""

    def refresh_one():
        fit = decision_prior_refresh()
        return fit.version if fit else None

    return _per_tenant("prior refresh", refresh_one)


@shared_task(name="learning.resolution_records_purge", ignore_result=True, one_transaction=False)
def resolution_records_purge_task() -> dict:
    """Delete resolution records, ambiguous answers and ended import jobs older than RESOLUTION_RETENTION_DAYS
    (beat: daily)."""

    return {
        "records": resolution_records_purge(),
        "disambiguations": disambiguations_purge(),
        "import_jobs": phrase_import_jobs_purge(),
    }


@shared_task(name="learning.tenant_indexes_sync", ignore_result=True)
def tenant_indexes_sync_task() -> dict:
    """Keep a partial HNSW index for every tenant large enough to need one (beat: hourly). Sizes are compared
    across tenants, so it runs with every tenant in view (a worker's default), never inside one tenant's scope."""

    if tenant_filter_ids() is not None:
        logger.warning("tenant index sync refused inside one tenant's scope; the hourly beat runs it")
        return {"refused": True}
    result = learned_phrase_tenant_indexes_sync()
    return {
        "created": result.created,
        "rebuilt": result.rebuilt,
        "dropped": result.dropped,
        "kept": result.kept,
        "failed": result.failed,
        "busy": result.busy,
    }
