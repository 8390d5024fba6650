"""A plain INSERT for a model instance, for rows written on every request."""

from django.db import connection
from django.db.models.expressions import DatabaseDefault


def row_insert(obj) -> None:
    """INSERT ``obj`` (a new instance) and set its primary key: each field prepared as the ORM prepares it
    (``pre_save`` fills auto_now_add; ``get_db_prep_save`` adapts JSON, UUIDs, ...), a field left to its
    database default is left out. No signals are sent, no history is written: for models that have neither
    (resolution and disambiguation records), where the ORM's compiler costs a millisecond a request."""
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
        cursor.execute(sql, values)
        obj.pk = cursor.fetchone()[0]
    obj._state.adding = False
    obj._state.db = connection.alias
