"""Migration operations that an operator can run again after an interruption."""

from django.contrib.postgres.operations import AddIndexConcurrently


def index_valid(connection, name: str) -> bool | None:
    """Whether the index ``name`` (in the search path) is valid: True, False (a ``CREATE INDEX CONCURRENTLY`` that
    was interrupted or failed left it INVALID), None when there is none."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
            [name],
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


class AddIndexConcurrentlyResumable(AddIndexConcurrently):
    """``AddIndexConcurrently`` that a migration interrupted part way completes when it runs again. Each concurrent
    build commits on its own, so an interrupted migration of several leaves the ones built (valid: kept) and the one
    building (INVALID: dropped and built again); Django's own operation fails on the first that exists."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._ensure_not_in_transaction(schema_editor)
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        valid = index_valid(schema_editor.connection, self.index.name)
        if valid:
            return
        if valid is False:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.index.name)}")
        schema_editor.add_index(model, self.index, concurrently=True)
