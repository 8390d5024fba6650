"""Migration operation that creates pgvector's extension, or says in one line why it cannot."""

from django.core.management.base import CommandError
from django.db import migrations

MIN_PGVECTOR = (0, 8)


class CreateVectorExtension(migrations.operations.base.Operation):
    reversible = True

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            row = cursor.fetchone()
            if row is None:
                raise CommandError(
                    "PostgreSQL has no pgvector extension: install pgvector >= 0.8 on the server "
                    "(e.g. the postgresql-NN-pgvector package) or unset DATABASE_URL to use the embedded server."
                )
            version = tuple(int(p) for p in row[0].split(".")[:2])
            if version < MIN_PGVECTOR:
                raise CommandError(f"pgvector {row[0]} is too old: iterative index scans need pgvector >= 0.8.")
            cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        pass

    def describe(self):
        return "Create the pgvector extension"
