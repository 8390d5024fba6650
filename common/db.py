"""Statements on every request's path: a plain INSERT for a model instance, and a statement sent together with the
``SET LOCAL`` lines it needs in one round trip, prepared once per connection where it is on every resolve."""

import contextlib
import struct

import numpy as np
import psycopg
from django.db import connection
from django.db.models.expressions import DatabaseDefault

# For rows on every request whose loss in a crash costs nothing stored (records of resolutions and open
# disambiguations): the commit does not wait for the WAL flush.
ASYNC_COMMIT = ("SET LOCAL synchronous_commit TO OFF",)


def tenant_lock(namespace: str, key: str | None = None, *, shared: bool = False) -> None:
    """Inside a transaction: hold an advisory lock until it ends, on ``namespace`` (ending in ':') in the tenant the
    database gives the rows written (``tenants_current_id()``), and ``key`` when given; ``shared`` holders never wait on
    each other, only on an exclusive one."""
    fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {fn}(hashtextextended(%s::text || coalesce(tenants_current_id()::text, '') || coalesce(':' || %s::text, ''), 0))",
            [namespace, key],
        )


class VectorParam:
    """A query vector as a statement parameter (``%(q)s::vector``): sent in pgvector's binary form by a prepared
    statement (1.5 kB instead of 8 kB of text formatted and parsed again), as its text literal otherwise."""

    __slots__ = ("vector",)

    def __init__(self, vector):
        self.vector = np.asarray(vector, dtype=np.float32)

    def literal(self) -> str:
        return "[" + ",".join(map(str, self.vector.tolist())) + "]"


class _VectorBinaryDumper(psycopg.adapt.Dumper):
    """pgvector's binary input (``vector_recv``): dimensions and a reserved word as int16, then float4, all in
    network order. The type is left for the server to infer from the statement's ``::vector`` cast."""

    format = psycopg.pq.Format.BINARY
    oid = 0

    def dump(self, obj: VectorParam) -> bytes:
        return struct.pack(">HH", obj.vector.shape[0], 0) + obj.vector.astype(">f4").tobytes()


class _PreparedCursor(psycopg.Cursor):
    """Binds on the server and prepares each statement once per connection (psycopg keeps the names)."""

    def __init__(self, connection):
        super().__init__(connection)
        self.adapters.register_dumper(VectorParam, _VectorBinaryDumper)

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


def _as_text(params):
    """``params`` with each VectorParam as its text literal (for cursors that bind on the client)."""
    if isinstance(params, dict):
        return {k: v.literal() if isinstance(v, VectorParam) else v for k, v in params.items()}
    if isinstance(params, list | tuple):
        return [v.literal() if isinstance(v, VectorParam) else v for v in params]
    return params


def _prepared_cursor():
    """A cursor whose statements run from a plan prepared once per connection, wrapped as Django wraps its own
    (errors, query log, execute wrappers); None when the connection keeps no prepared statements."""
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None or not psycopg.Pipeline.is_supported():  # pipelines need libpq 14+
        return None
    cursor = _PreparedCursor(raw)
    return connection.make_debug_cursor(cursor) if connection.queries_logged else connection.make_cursor(cursor)


def rows_fetch(
    cursor, sql: str, params=None, *, before: tuple[str, ...] = (), after: tuple[str, ...] = (), prepared: bool = False
) -> list:
    """The rows of ``sql``, run between the parameterless statements ``before`` and ``after`` (``SET LOCAL`` lines)
    in one round trip.

    ``prepared``: ``sql`` runs from a plan PostgreSQL made once for this connection (``DB_PREPARED_STATEMENTS``;
    for statements on every request whose planning costs more than their execution). Its text must name
    everything that decides the plan (a tenant whose partial index serves it, a LIMIT) as literals: a generic
    plan sees parameters as unknown. The lines around it, and a BEGIN, travel in the same pipeline.
    Otherwise, with client-side binding (the default) psycopg sends the lines as one simple query; with
    server-side binding, one statement at a time."""
    prepared_cursor = _prepared_cursor() if prepared else None
    if prepared_cursor is not None:
        # a pipeline: the lines around it, and the BEGIN psycopg sends first in a new transaction, share its round trip
        with connection.wrap_database_errors, connection.connection.pipeline():
            for line in before:
                cursor.execute(line)
            prepared_cursor.execute(sql, params)
            for line in after:
                cursor.execute(line)
        return prepared_cursor.fetchall()
    params = _as_text(params)
    if not before and not after:
        cursor.execute(sql, params)
        return cursor.fetchall()
    if isinstance(cursor.cursor, psycopg.ClientCursor):
        cursor.execute("; ".join([*before, sql, *after]), params)
        for _ in before:
            cursor.nextset()
        return cursor.fetchall()
    for line in before:
        cursor.execute(line)
    cursor.execute(sql, params)
    rows = cursor.fetchall()
    for line in after:
        cursor.execute(line)
    return rows


def vector_from_binary(data: bytes) -> np.ndarray:
    """A pgvector value in its binary form (``vector_send``: dimensions and a reserved word as int16, then float4,
    all in network order) as float32."""
    (dim,) = struct.unpack_from(">H", data)
    if len(data) != 4 + 4 * dim:
        raise ValueError(f"a vector of {dim} dimensions in {len(data)} bytes")
    return np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32)


def values_list_binary(queryset, *, vectors: tuple[int, ...]) -> list[tuple]:
    """The rows of a ``values_list`` queryset fetched in PostgreSQL's binary format, its ``vectors`` columns (by
    position) decoded as float32 (None stays None): about ten times faster than the ORM, which parses each vector
    from its text. For reads of many vectors (a refit reads every anchor). Other columns come as psycopg loads
    them in binary (str, int, float, bool, datetime, ...). The statement is the queryset's own SQL, bound on the
    server and never prepared (a pooler in transaction mode keeps no prepared statements); Django's execute
    wrappers do not see it."""
    sql, params = queryset.query.sql_with_params()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        cursor = psycopg.Cursor(connection.connection)
        try:
            cursor.execute(sql, params, prepare=False, binary=True)
            rows = cursor.fetchall()
        finally:
            cursor.close()
    return [tuple(vector_from_binary(v) if i in vectors and v is not None else v for i, v in enumerate(row)) for row in rows]


def _insert_statement(obj) -> tuple[str, list]:
    """The INSERT of ``obj`` (a new instance) with its values, each field prepared as the ORM prepares it (``pre_save``
    fills auto_now_add; ``get_db_prep_save`` adapts JSON, UUIDs, ...); a field left to its database default is left out."""
    meta = obj._meta
    columns, values = [], []
    for field in meta.concrete_fields:
        if field.primary_key and getattr(obj, field.attname) is None:
            continue
        value = field.pre_save(obj, add=True)
        if isinstance(value, DatabaseDefault):
            continue
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(value, connection))
    sql = (
        f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(values))}) RETURNING {connection.ops.quote_name(meta.pk.column)}"
    )
    return sql, values


def _inserted(obj, pk) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def row_insert(obj, *, before: tuple[str, ...] = ()) -> None:
    """INSERT ``obj`` (a new instance) and set its primary key. No signals are sent, no history is written: for
    models that have neither (resolution and disambiguation records), where the ORM's compiler costs a
    millisecond a request. ``before``: ``SET LOCAL`` lines sent with it (``rows_fetch``)."""
    rows_insert([obj], before=before)


def rows_insert(objs, *, before: tuple[str, ...] = ()) -> None:
    """``row_insert`` for several new instances: with prepared statements, all of them and the ``before`` lines go in
    one pipeline (one round trip); otherwise one statement each, the lines sent with the first."""
    sqls = [_insert_statement(obj) for obj in objs]
    prepared = _prepared_cursor() if sqls else None
    if prepared is None:
        with connection.cursor() as cursor:
            for i, (obj, (sql, values)) in enumerate(zip(objs, sqls, strict=True)):
                _inserted(obj, rows_fetch(cursor, sql, values, before=before if i == 0 else ())[0][0])
        return
    cursors = [prepared] + [_prepared_cursor() for _ in sqls[1:]]  # one cursor a statement: each keeps its result
    with connection.cursor() as cursor, connection.wrap_database_errors, connection.connection.pipeline():
        for line in before:
            cursor.execute(line)
        for prepared_cursor, (sql, values) in zip(cursors, sqls, strict=True):
            prepared_cursor.execute(sql, values)
    for obj, prepared_cursor in zip(objs, cursors, strict=True):
        _inserted(obj, prepared_cursor.fetchone()[0])


# Rows a purge deletes in one transaction: a backlog of millions goes in short transactions (locks, WAL and memory
# bounded), never in one statement.
PURGE_BATCH = 5000


def rows_delete_in_batches(queryset, *, batch: int | None = None, also=None) -> int:
    """Delete the rows of ``queryset`` ``batch`` at a time in the order of their keys, each batch its own
    transaction (with the rows that cascade from them, and ``also(ids)``, the caller's own, such as their audit
    trail); answers how many of the queryset's. Rows added meanwhile that match are deleted too; a row another
    transaction holds locked is left for the next run."""
    from django.db import transaction

    batch = PURGE_BATCH if batch is None else batch
    model = queryset.model
    pk = model._meta.pk.attname
    deleted = 0
    after = None
    while True:
        with transaction.atomic():
            page = queryset.order_by(pk)
            if after is not None:
                page = page.filter(**{f"{pk}__gt": after})
            ids = list(page.select_for_update(skip_locked=True).values_list(pk, flat=True)[:batch])
            if not ids:
                return deleted
            deleted += model.objects.filter(**{f"{pk}__in": ids}).delete()[1].get(model._meta.label, 0)  # not cascades
            if also is not None:
                also(ids)
        after = ids[-1]


def rows_purge(queryset, *, dry_run: bool = False, also=None) -> int:
    """``rows_delete_in_batches``, or with ``dry_run`` how many rows it would delete now (nothing is deleted)."""
    return queryset.order_by().count() if dry_run else rows_delete_in_batches(queryset, also=also)


@contextlib.contextmanager
def advisory_try_lock(namespace: int, key: int = 0):
    """Yields whether this connection took the PostgreSQL advisory lock (``namespace``, ``key``) without waiting:
    for a job that must not run twice at once (the second leaves). Inside a transaction it is the transaction's;
    outside, the session's, released at the end of the block."""
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [namespace, key])
            yield cursor.fetchone()[0]
            return
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
        held = cursor.fetchone()[0]
    try:
        yield held
    finally:
        if held and connection.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
