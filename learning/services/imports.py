"""Bulk import of learned phrases: every row validated first, then all rows in one transaction or none; a large
import sent through the API runs as a job on a worker (``phrase_import_job_create``, ``phrase_import_job_run``)."""

import logging
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from tqdm import tqdm

from common.api import ApplicationError, Conflict
from common.db import tenant_lock
from common.tasks import task_send_on_commit
from common.text import normalize_phrase
from embeddings.services import embedding_assign, embeddings_by_text
from learning import selectors
from learning.importing import ImportRow
from learning.models import LearnedPhrase, PhraseImportJob, Verb
from learning.resolution import profile
from learning.services.decisions import decision_prior_fit_send
from learning.services.phrases import user_learning_lock
from tenants.context import acting_agent, acting_agent_id, private_agent_id

logger = logging.getLogger(__name__)


class ImportRejected(ApplicationError):
    """An import with invalid rows: nothing was written; ``extra["errors"]`` names every bad row."""

    code = "import_invalid"


class ImportAbandoned(ApplicationError):
    """An import job that was erased with its user, or taken over by another run, while it embedded its rows:
    nothing was written."""

    status_code = 409
    code = "import_abandoned"


def _import_error(errors: list, row, field: str, reason: str) -> None:
    errors.append({"row": row.number, "field": field, "reason": reason})


def phrases_import(
    *,
    rows: list,
    user_id: str | None = None,
    dry_run: bool = False,
    progress: bool = False,
    source: str = "import",
    override: bool = False,
    still_wanted: Callable[[], bool] | None = None,
) -> dict:
    """Import ``ImportRow``s as learned phrases of one scope: all valid rows in one transaction, or nothing.

    ``still_wanted``: asked in the write transaction once its locks are held (the user's learning lock first, which
    an erasure of the user takes exclusive); False (the job was erased with its user, or claimed by another run):
    nothing is written, ``ImportAbandoned`` is raised.

    A stored phrase that was switched off (a reviewer's revert), or that a correction or a confirmation points to
    another verb (a user's phrase: global phrases change through review, and an import re-points those), is kept as
    it is ("kept"): an import run again never undoes those decisions, unless ``override``.

    Rows are checked first (empty phrase or verb, unknown verb, one phrase mapped to two verbs, a mapping an
    active blocklist entry forbids exactly or by paraphrase). A dry run reports what would change and writes
    nothing. Vectors are computed in batches (``progress`` shows a tqdm bar) before the transaction opens (inside it
    only for rows another write changed between the two reads).
    Imports into one tenant are serialised: new versus updated is decided again under a lock in the write transaction.
    """

    errors: list[dict] = []
    verbs = {v.name: v for v in Verb.objects.filter(name__in={r.verb for r in rows if r.verb}, is_active=True)}
    plan: dict[str, tuple] = {}  # normalized -> (row, verb)
    duplicates = 0
    for row in rows:
        normalized = normalize_phrase(row.phrase)
        if not normalized:
            _import_error(errors, row, "phrase", "The phrase is empty.")
            continue
        if len(row.phrase) > 500 or len(normalized) > 500:
            _import_error(errors, row, "phrase", "The phrase is longer than 500 characters.")
            continue
        if not row.verb:
            _import_error(errors, row, "verb", "The verb is empty.")
            continue
        if row.verb not in verbs:
            _import_error(errors, row, "verb", f"Unknown or inactive verb {row.verb!r}.")
            continue
        if normalized in plan:
            first, verb = plan[normalized]
            if verb.name != row.verb:
                _import_error(
                    errors,
                    row,
                    "verb",
                    f"{row.phrase!r} is mapped to {row.verb} here and to {verb.name} in row {first.number}.",
                )
            else:
                duplicates += 1
            continue
        plan[normalized] = (row, verbs[row.verb])

    blocks = list(
        selectors.active_blocks(user_id=user_id)
        .filter(verb__name__in=list(verbs))
        .values_list("pk", "normalized", "verb__name", "embedding", "embedding_model")
    )
    exact_blocks = {(n, v): pk for pk, n, v, _, _ in blocks}
    for normalized, (row, verb) in plan.items():
        if (normalized, verb.name) in exact_blocks:
            _import_error(
                errors,
                row,
                "verb",
                f"Blocklist entry {exact_blocks[(normalized, verb.name)]} forbids {row.phrase!r} → {verb.name}.",
            )
    exactly_blocked = {n for n, (_, verb) in plan.items() if (n, verb.name) in exact_blocks}

    existing = selectors.import_existing(normalized=list(plan), user_id=user_id)
    added, updated, unchanged, kept = _import_classify(plan, existing, override)

    # Vectors: for rows to write (not in a dry run) and for rows whose verb has semantic blocks to check.
    blocked_verbs = {v for _, _, v, _, _ in blocks}
    need_check = [n for n in plan if plan[n][1].name in blocked_verbs and n not in unchanged and n not in exactly_blocked]
    to_write = [] if dry_run or errors else [n for n in added + updated if n not in existing or not existing[n].embedding_model]
    vectors, model = embeddings_by_text(texts=need_check + to_write, progress=progress)

    _import_semantic_block_errors(errors, plan=plan, texts=need_check, vectors=vectors, model=model, blocks=blocks)
    if errors:
        errors.sort(key=lambda e: e["row"])
        _import_reject(errors)

    result = {
        "dry_run": dry_run,
        "scope": "user" if user_id else "global",
        "user_id": user_id,
        "rows": len(rows),
        "imported": len(added),
        "updated": len(updated),
        "unchanged": len(unchanged) + duplicates,
        "kept": len(kept),
        "rejected": 0,
        "unembedded": 0,
        "errors": [],
    }
    if dry_run:
        result["would_add"] = [plan[n][0].phrase for n in added[:100]]
        result["would_update"] = [plan[n][0].phrase for n in updated[:100]]
        result["would_keep"] = [plan[n][0].phrase for n in kept[:100]]
        return result

    now = timezone.now()
    try:
        with transaction.atomic():
            if user_id:
                user_learning_lock(user_id=user_id)  # an erasure of the user waits for the import, or runs first
            _import_lock()
            if still_wanted is not None and not still_wanted():
                raise ImportAbandoned("The import is no longer wanted (its job was erased or is run by another worker).")
            # decided again under the lock: a concurrent import of the same rows has committed by now
            existing = selectors.import_existing(normalized=list(plan), user_id=user_id)
            first_unchanged = set(unchanged)
            added, updated, unchanged, kept = _import_classify(plan, existing, override)
            # Rows that changed between the two reads (deleted, switched off, re-pointed meanwhile): their vectors
            # and the paraphrase check of blocks were skipped on the first read; done now, for those rows only.
            late = [n for n in added + updated if n not in vectors and not (existing.get(n) and existing[n].embedding_model)]
            late_check = [n for n in added + updated if n in first_unchanged and plan[n][1].name in blocked_verbs]
            if late or late_check:
                more, more_model = embeddings_by_text(texts=list(dict.fromkeys(late + late_check)))
                if more and (not vectors or more_model == model):
                    vectors, model = {**vectors, **more}, more_model
                late_errors: list[dict] = []
                _import_semantic_block_errors(
                    late_errors, plan=plan, texts=late_check, vectors=vectors, model=model, blocks=blocks
                )
                if late_errors:
                    _import_reject(sorted(late_errors, key=lambda e: e["row"]))
            kept += _import_write(
                plan=plan,
                added=added,
                updated=updated,
                existing=existing,
                vectors=vectors,
                model=model,
                user_id=user_id,
                source=source,
                now=now,
                override=override,
                progress=progress,
            )
    except IntegrityError:  # a phrase learned meanwhile by another path (a confirmation, the API)
        raise Conflict(
            "Another write added some of these phrases meanwhile; nothing was imported. Retry the import.",
            field="content",
        ) from None
    result["imported"], result["updated"] = len(added), len(updated)
    result["unchanged"], result["kept"] = len(unchanged) + duplicates, len(kept)
    result["unembedded"] = sum(
        1 for n in added + updated if n not in vectors and not (existing.get(n) and existing[n].embedding_model)
    )
    return result


def _import_semantic_block_errors(errors: list, *, plan: dict, texts: list, vectors: dict, model, blocks: list) -> None:
    """Add an error for each of ``texts`` that is a paraphrase (cosine >= the blocklist threshold) of a phrase an
    active block forbids for its verb, and for each that cannot be compared with such a block (the text has no
    vector, the embedder being unavailable, or the block none of ``model``): what cannot be checked is not
    learned (the same rule as a confirmation's)."""
    import numpy as np

    if not texts:
        return
    threshold = profile(model or None)["blocklist_threshold"]
    for verb_name in {plan[n][1].name for n in texts}:
        of_verb = [(pk, phrase, e, m) for pk, phrase, v, e, m in blocks if v == verb_name]
        mine = [n for n in texts if plan[n][1].name == verb_name]
        if not of_verb or not mine:
            continue
        unchecked = next(((pk, phrase) for pk, phrase, e, m in of_verb if e is None or m != model), None)
        for n in mine:
            if n not in vectors or unchecked is not None:
                pk, phrase = unchecked or of_verb[0][:2]
                row = plan[n][0]
                _import_error(
                    errors,
                    row,
                    "verb",
                    f"{row.phrase!r} → {verb_name} could not be compared with blocklist entry {pk} (“{phrase}”): "
                    "a vector is missing (the embedder may be unavailable); retry the import later.",
                )
        mine = [n for n in mine if n in vectors and unchecked is None]
        if not mine:
            continue
        bm = np.stack([np.asarray(e, dtype=np.float32) for _, _, e, _ in of_verb])
        bm = bm / np.maximum(np.linalg.norm(bm, axis=1, keepdims=True), 1e-12)
        tm = np.stack([np.asarray(vectors[n], dtype=np.float32) for n in mine])
        tm = tm / np.maximum(np.linalg.norm(tm, axis=1, keepdims=True), 1e-12)
        sims = tm @ bm.T
        for i, n in enumerate(mine):
            j = int(np.argmax(sims[i]))
            if sims[i, j] >= threshold:
                row = plan[n][0]
                _import_error(
                    errors,
                    row,
                    "verb",
                    f"Blocklist entry {of_verb[j][0]} forbids {row.phrase!r} → {verb_name} (a paraphrase of a blocked phrase).",
                )


# Sources of a phrase someone decided on purpose, which an import does not re-point (unless told to override).
TAUGHT_SOURCES = frozenset({"correction", "confirmation"})


def _decided(current, verb) -> bool:
    """Whether a stored phrase is one an import keeps as it is: switched off, or taught another verb on purpose."""
    return not current.is_active or (current.verb_id != verb.pk and current.source in TAUGHT_SOURCES)


def _import_classify(plan: dict, existing: dict, override: bool) -> tuple[list, list, list, list]:
    """The planned phrases split into (added, updated, unchanged, kept) against the rows stored; kept: switched off,
    or taught another verb by a correction or a confirmation (``phrases_import``)."""
    added, updated, unchanged, kept = [], [], [], []
    for normalized, (_row, verb) in plan.items():
        current = existing.get(normalized)
        if current is None:
            added.append(normalized)
        elif not override and _decided(current, verb):
            kept.append(normalized)
        elif current.verb_id == verb.pk and current.is_active and current.embedding_model:
            unchanged.append(normalized)
        else:
            updated.append(normalized)
    return added, updated, unchanged, kept


def _import_lock() -> None:
    """Inside the write transaction: wait for any other import into the same tenant (the one its rows land in,
    whatever scope each import runs in) to commit."""
    tenant_lock("learning:import:")


def _import_write(*, plan, added, updated, existing, vectors, model, user_id, source, now, override, progress=False) -> list:
    """Inside the write transaction: create the added rows, update the changed ones (with history). The rows to
    update are locked first, in key order, as a correction locks its phrase and anchors before it creates one: an
    import and a correction of overlapping texts never hold each other's rows (one waits, or gets a Conflict)."""
    from simple_history.utils import bulk_create_with_history, bulk_update_with_history

    locked = {}
    if updated:
        pks = sorted(existing[n].pk for n in updated)
        locked = {r.normalized: r for r in LearnedPhrase.objects.select_for_update().filter(pk__in=pks).order_by("pk")}
        gone = [plan[n][0].phrase for n in updated if n not in locked]
        if gone:  # deleted meanwhile (the admin)
            raise Conflict(
                f"{len(gone)} phrase(s) to update were deleted meanwhile (first: {gone[0]!r}); nothing was imported. "
                "Retry the import.",
                field="content",
            )
    # switched off or taught another verb after they were read (a reviewer, a correction): kept, decided on the rows locked
    kept = [] if override else [n for n in updated if _decided(locked[n], plan[n][1])]
    if kept:
        updated[:] = [n for n in updated if n not in set(kept)]
    new_rows = []
    for n in added:
        row, verb = plan[n]
        obj = LearnedPhrase(
            phrase=row.phrase,
            normalized=n,
            verb=verb,
            user_id=user_id,
            private_agent_id=selectors.phrase_owner(user_id),
            source=source,
            confidence=1.0,
            created_at=now,
            updated_at=now,
        )
        if n in vectors:
            embedding_assign(rows=[obj], vectors=[vectors[n]], model=model)
        new_rows.append(obj)
    # in batches under a bar: the HNSW indexes make the writes of a large import take minutes, all in this transaction
    for start in tqdm(range(0, len(new_rows), 1000), desc="writing phrases", unit="batch", disable=not progress):
        batch = new_rows[start : start + 1000]
        bulk_create_with_history(batch, LearnedPhrase, batch_size=1000, default_change_reason=f"import ({source})")
    if updated:
        changed = []
        for n in updated:
            obj = locked[n]
            row, verb = plan[n]
            obj.phrase, obj.verb, obj.source, obj.confidence, obj.is_active, obj.updated_at = (
                row.phrase,
                verb,
                source,
                1.0,
                True,
                now,
            )
            if n in vectors:
                embedding_assign(rows=[obj], vectors=[vectors[n]], model=model)
            changed.append(obj)
        bulk_update_with_history(
            changed,
            LearnedPhrase,
            [
                "phrase",
                "verb",
                "source",
                "confidence",
                "is_active",
                "updated_at",
                "embedding",
                "embedding_model",
                "embedding_hash",
            ],
            batch_size=1000,
            default_change_reason=f"import ({source})",
        )
    if user_id is None and (added or updated):
        decision_prior_fit_send()  # global phrases are the prior's anchors too
    return kept


def _import_reject(errors: list[dict]) -> None:
    first = errors[0]
    raise ImportRejected(
        f"{len(errors)} invalid row(s); nothing was imported. Row {first['row']}: {first['reason']}",
        field="content",
        extra={"errors": errors[:1000], "rejected": len(errors), "imported": 0, "updated": 0, "unchanged": 0},
    )


# --- Imports run as jobs ---


def phrase_import_job_create(
    *,
    rows: list,
    user_id: str | None = None,
    dry_run: bool = False,
    override: bool = False,
    source: str = "import",
) -> PhraseImportJob:
    """Store ``ImportRow``s as a queued import job, in the caller's tenant and as its agent, and send the task that
    runs it once the job commits (with the tenant and agent of now). With the broker down the job stays queued, never
    run inside the request that made it (it may take minutes): the sweep (``phrase_import_jobs_sweep``) runs it once
    it has waited ``LEARNING_IMPORT_JOB_SEND_WAIT_S``. With no broker configured, tasks run here (eager)."""
    with transaction.atomic():
        job = PhraseImportJob.objects.create(
            rows=[{"number": r.number, "phrase": r.phrase, "verb": r.verb} for r in rows],
            row_count=len(rows),
            user_id=user_id,
            dry_run=dry_run,
            override=override,
            source=source,
            agent_id=acting_agent_id(),
            private_agent_id=private_agent_id(),
        )
        task_send_on_commit("learning.phrase_import_job_run", job.pk, fallback_inline=False)
    return job


def phrase_import_job_run(*, job_id: int) -> PhraseImportJob | None:
    """Run a queued import job once: claim it (queued -> running), import its rows (``phrases_import``), store the
    outcome; None when it is not there to run (unknown, running, or finished: a redelivered task imports nothing).

    Three transactions, so the job's own writes outlive the import's rollback: the claim, the import (all or
    nothing), the outcome. A job still running ``LEARNING_IMPORT_JOB_STALE_S`` after it started died with its
    worker (nothing of its import committed) and is claimed again; a run whose claim was taken over stores nothing.
    """
    claimed = _import_job_claim(job_id=job_id)
    if claimed is None:
        return None
    job, started_at = claimed
    runs_as = job.agent if job.agent_id is not None and acting_agent_id() != job.agent_id else None
    outcome: dict = {"status": PhraseImportJob.Status.FAILED}
    try:
        # a savepoint only inside an outer transaction (an inline run, a pooler's one transaction): a failed
        # statement of the import must not abort the transaction the outcome is written in
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            with acting_agent(runs_as) if runs_as is not None else nullcontext():
                result = phrases_import(
                    rows=[ImportRow(number=r["number"], phrase=r["phrase"], verb=r["verb"]) for r in job.rows],
                    user_id=job.user_id,
                    dry_run=job.dry_run,
                    progress=False,
                    source=job.source,
                    override=job.override,
                    still_wanted=lambda: _import_job_still_claimed(job_id=job.pk, started_at=started_at),
                )
    except ImportRejected as exc:
        outcome.update(errors=exc.extra.get("errors", []), error_code=exc.code, error_detail=exc.message)
    except ApplicationError as exc:  # another write meanwhile (a Conflict): the import may be sent again
        outcome.update(error_code=exc.code, error_detail=exc.message)
    except Exception as exc:
        logger.exception("import job %s failed", job.pk)
        outcome.update(error_code="error", error_detail=f"{exc.__class__.__name__}: {exc}"[:2000])
    else:
        outcome = {"status": PhraseImportJob.Status.SUCCEEDED, "result": result}
    return _import_job_finish(job=job, started_at=started_at, outcome=outcome)


def _import_job_still_claimed(*, job_id: int, started_at) -> bool:
    """Inside the import's write transaction: the job is still there and still this run's (an erasure of its user
    deletes it; a run that took over a stale claim changed ``started_at``), locked until the import commits."""
    return (
        PhraseImportJob.objects.select_for_update()
        .filter(pk=job_id, status=PhraseImportJob.Status.RUNNING, started_at=started_at)
        .exists()
    )


def _import_job_claim(*, job_id: int) -> tuple[PhraseImportJob, object] | None:
    """In its own transaction: the job marked running (one UPDATE, so two runs never both claim it) and the time
    it was claimed at, or None when it is not queued (or stale)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.LEARNING_IMPORT_JOB_STALE_S)
    with transaction.atomic():
        claimed = (
            PhraseImportJob.objects.filter(pk=job_id)
            .filter(Q(status=PhraseImportJob.Status.QUEUED) | Q(status=PhraseImportJob.Status.RUNNING, started_at__lt=stale))
            .update(status=PhraseImportJob.Status.RUNNING, started_at=now)
        )
        if not claimed:
            if not PhraseImportJob.objects.filter(pk=job_id).exists():
                logger.warning("import job %s not found in this scope: nothing to run", job_id)
            return None
        return PhraseImportJob.objects.select_related("agent").get(pk=job_id), now


def _import_job_finish(*, job: PhraseImportJob, started_at, outcome: dict) -> PhraseImportJob | None:
    """In its own transaction: the outcome stored and the rows let go (they are learned phrases now, or were
    refused), unless another run claimed the job meanwhile (None)."""
    with transaction.atomic():
        stored = PhraseImportJob.objects.filter(pk=job.pk, status=PhraseImportJob.Status.RUNNING, started_at=started_at).update(
            rows=[], finished_at=timezone.now(), **outcome
        )
    if not stored:
        logger.warning("import job %s was erased with its user, or claimed again, while it ran: this run stores nothing", job.pk)
        return None
    return PhraseImportJob.objects.defer("rows").get(pk=job.pk)


def phrase_import_jobs_purge(*, days: int | None = None) -> int:
    """Delete the import jobs that ended more than ``days`` (RESOLUTION_RETENTION_DAYS) ago: their outcome names
    rows, users and the errors' texts. Answers how many."""
    days = settings.RESOLUTION_RETENTION_DAYS if days is None else days
    ended = PhraseImportJob.objects.filter(
        status__in=[PhraseImportJob.Status.SUCCEEDED, PhraseImportJob.Status.FAILED],
        finished_at__lt=timezone.now() - timedelta(days=days),
    )
    count, _ = ended.delete()
    if count:
        logger.info("purged %d import job(s) that ended more than %d day(s) ago", count, days)
    return count


# --- Embedding backfill (foundation) ---
