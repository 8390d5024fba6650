"""Per-tenant HNSW indexes on learned phrases.

One HNSW index over every tenant's learned phrases serves a tenant that owns most of them, but for a tenant that
owns a few percent PostgreSQL reads the tenant's rows through its b-tree and sorts them by distance (it costs a
vector distance like any operator): at a million phrases, 47 ms for a tenant of 60,000 where a partial HNSW index
``WHERE tenant_id = <id>`` answers in about 1 ms. ``learned_phrase_tenant_indexes_sync`` keeps one partial index
for each tenant with at least ``LEARNED_TENANT_INDEX_MIN_PHRASES`` learned phrases and less than half of all of
them, builds them without blocking writes (``CREATE INDEX CONCURRENTLY`` outside a transaction), rebuilds an
index a failed build left invalid, and drops those of tenants that shrank below half the threshold or are gone.
The planner picks a tenant's index by itself: the tier query filters by the tenant's id.
"""

import contextlib
import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from tqdm import tqdm

from common.db import advisory_try_lock
from learning.selectors.indexes import (
    LEARNED_TABLE,
    TENANT_INDEX_PREFIX,
    learned_hnsw_definition,
    learned_phrase_counts_by_tenant,
    learned_tenant_indexes,
)
from learning.selectors.tiers import tenants_with_own_index_forget

logger = logging.getLogger(__name__)


@dataclass
class IndexSync:
    created: list[int] = field(default_factory=list)
    rebuilt: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)  # a build or drop that failed: logged, tried again next run
    busy: bool = False  # another sync was running: this one did nothing


# One sync at a time: a second one (the hourly beat while a long build runs, a redelivered task) would take the
# build in progress, invalid until it ends, for a failed one's leftover, drop it and deadlock with it.
LOCK_NAMESPACE_INDEXES = 61004


def _step(out: IndexSync, tenant_id: int, concurrently: bool, work) -> bool:
    """``work()`` for one tenant; a failure is logged and counted, and the other tenants still run (inside a
    transaction, in a savepoint so the transaction goes on)."""
    try:
        with contextlib.nullcontext() if concurrently else transaction.atomic():
            work()
        return True
    except Exception:
        logger.exception("tenant %s: its index on learned phrases could not be built or dropped; next run retries", tenant_id)
        out.failed.append(tenant_id)
        return False


def _create(tenant_id: int, definition: str, concurrently: bool) -> None:
    name = f"{TENANT_INDEX_PREFIX}{int(tenant_id)}"
    using = definition[definition.index(" USING ") :]
    sql = f'CREATE INDEX {"CONCURRENTLY " if concurrently else ""}"{name}" ON {LEARNED_TABLE}{using} WHERE tenant_id = {int(tenant_id)}'
    with connection.cursor() as cursor:
        if not concurrently:  # inside a transaction: deferred foreign-key checks would forbid the build
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"SET maintenance_work_mem = '{settings.LEARNED_INDEX_BUILD_MEMORY}'")
        try:
            cursor.execute(sql)
        finally:
            cursor.execute("RESET maintenance_work_mem")


def _drop(tenant_id: int, concurrently: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX {"CONCURRENTLY " if concurrently else ""}IF EXISTS "{TENANT_INDEX_PREFIX}{int(tenant_id)}"')


def learned_phrase_tenant_indexes_sync(*, min_phrases: int | None = None, progress: bool = False) -> IndexSync:
    """Create, rebuild and drop the per-tenant partial HNSW indexes so they match the tenants' sizes now
    (``progress``: a tqdm bar over the tenants).

    Not one transaction: each index is built concurrently (writes go on meanwhile) and stands on its own; run
    again, it finishes what an interrupted run left. Inside a transaction (tests) the builds are plain."""
    with advisory_try_lock(LOCK_NAMESPACE_INDEXES) as held:
        if not held:
            logger.info("tenant indexes on learned phrases: another sync is running; this one does nothing")
            return IndexSync(busy=True)
        return _sync(min_phrases=min_phrases, progress=progress)


def _sync(*, min_phrases: int | None, progress: bool) -> IndexSync:
    minimum = settings.LEARNED_TENANT_INDEX_MIN_PHRASES if min_phrases is None else min_phrases
    concurrently = not connection.in_atomic_block
    counts = learned_phrase_counts_by_tenant()
    total = sum(counts.values())
    existing = learned_tenant_indexes()  # tenant id -> valid
    definition = learned_hnsw_definition()
    out = IndexSync()
    for tenant_id, n in tqdm(sorted(counts.items()), desc="tenant indexes", unit="tenant", disable=not progress):
        wanted = n >= minimum and n * 2 < total
        keep = tenant_id in existing and n * 2 >= minimum and n * 2 < total  # hysteresis: no flapping at the edge
        if tenant_id in existing and not existing[tenant_id] and (wanted or keep):
            # an interrupted concurrent build leaves an invalid index behind (none is running: the lock says so)
            if _step(
                out, tenant_id, concurrently, lambda t=tenant_id: (_drop(t, concurrently), _create(t, definition, concurrently))
            ):
                out.rebuilt.append(tenant_id)
        elif tenant_id in existing and (wanted or keep):
            out.kept.append(tenant_id)
        elif wanted:
            if _step(out, tenant_id, concurrently, lambda t=tenant_id: _create(t, definition, concurrently)):
                out.created.append(tenant_id)
    for tenant_id in existing:
        settled = out.kept + out.rebuilt + out.created + out.failed
        if tenant_id not in settled and _step(out, tenant_id, concurrently, lambda t=tenant_id: _drop(t, concurrently)):
            out.dropped.append(tenant_id)
    if out.created or out.rebuilt or out.dropped:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {LEARNED_TABLE}")
        tenants_with_own_index_forget()
    logger.info(
        "tenant indexes on learned phrases: %s created, %s rebuilt, %s dropped, %s kept, %s failed",
        len(out.created),
        len(out.rebuilt),
        len(out.dropped),
        len(out.kept),
        len(out.failed),
    )
    return out
