"""Reads for the per-tenant HNSW indexes on learned phrases (learning.services.indexes)."""

from django.db import connection

LEARNED_TABLE = "learning_learnedphrase"
LEARNED_INDEX = "learnedphrase_embedding_hnsw"
TENANT_INDEX_PREFIX = "learnedphrase_hnsw_tenant_"


def learned_phrase_counts_by_tenant() -> dict[int, int]:
    """Learned phrases per tenant (every tenant in the caller's scope)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tenant_id, count(*) FROM {LEARNED_TABLE} GROUP BY tenant_id")
        return {int(t): int(n) for t, n in cursor.fetchall()}


def learned_tenant_indexes() -> dict[int, bool]:
    """Tenant id -> whether its partial index is valid (a failed concurrent build leaves it invalid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [LEARNED_TABLE, TENANT_INDEX_PREFIX.replace("_", "\\_") + "%"],
        )
        return {int(name[len(TENANT_INDEX_PREFIX) :]): bool(valid) for name, valid in cursor.fetchall()}


def learned_hnsw_definition() -> str:
    """The definition of the HNSW index over every learned phrase (its operator class and build parameters)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [LEARNED_INDEX])
        row = cursor.fetchone()
    if row is None:
        raise LookupError(f"index {LEARNED_INDEX} is missing; run manage.py migrate")
    return row[0]
