"""Statements on every request's path: a plain INSERT for a model instance, and a statement sent together with the
``SET LOCAL`` lines it needs, in one round trip."""

import psycopg
from django.db import connection
from django.db.models.expressions import DatabaseDefault


def rows_fetch(cursor, sql: str, params=None, *, before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> list:
    """The rows of ``sql``, run between the parameterless statements ``before`` and ``after`` (``SET LOCAL`` lines):
    one round trip where the connection binds parameters on the client (the default, ``DB_SERVER_SIDE_BINDING``
    off: psycopg sends the lines as one simple query), one per statement where it binds them on the server."""
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


def row_insert(obj, *, before: tuple[str, ...] = ()) -> None:
    """INSERT ``obj`` (a new instance) and set its primary key: each field prepared as the ORM prepares it
    (``pre_save`` fills auto_now_add; ``get_db_prep_save`` adapts JSON, UUIDs, ...), a field left to its
    database default is left out. No signals are sent, no history is written: for models that have neither
    (resolution and disambiguation records), where the ORM's compiler costs a millisecond a request. ``before``:
    ``SET LOCAL`` lines sent with it (``rows_fetch``)."""
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
    with connection.cursor() as cursor:
        obj.pk = rows_fetch(cursor, sql, values, before=before)[0][0]
    obj._state.adding = False
    obj._state.db = connection.alias
