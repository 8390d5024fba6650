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


# The SQL function behind ``embeddings.models.EmbeddingStale``. IMMUTABLE, as a partial index's predicate must be:
# ``convert_to(text, 'UTF8')`` is only STABLE (a conversion depends on the server encoding), but a database's encoding
# never changes. Declared immutable around a stable call, PostgreSQL never inlines it, so the query's, the index's
# and the statistics' expression stay the same call. Index maintenance runs it with search_path set to pg_catalog
# only: pgvector's type and function are named with their schema.
_STALE_FUNCTION_SQL = """
CREATE OR REPLACE FUNCTION embedding_stale(embedding {schema}.vector, embedding_hash text, content text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT embedding IS NULL OR {schema}.vector_norm(embedding) < {min_norm}::float8
        OR embedding_hash IS DISTINCT FROM encode(sha256(convert_to(content, 'UTF8')), 'hex')
$$
"""


class CreateEmbeddingStaleFunction(migrations.operations.base.Operation):
    """Create ``embedding_stale(embedding, embedding_hash, text)``: the vector is missing, shorter than ``min_norm``
    (no direction) or was made from other text."""

    reversible = True

    def __init__(self, min_norm: float):
        self.min_norm = min_norm

    def deconstruct(self):
        return self.__class__.__name__, [], {"min_norm": self.min_norm}

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        quote = schema_editor.connection.ops.quote_name
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
            )
            schema = cursor.fetchone()[0]
        schema_editor.execute(_STALE_FUNCTION_SQL.format(schema=quote(schema), min_norm=repr(float(self.min_norm))))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        schema_editor.execute("DROP FUNCTION IF EXISTS embedding_stale(vector, text, text)")

    def describe(self):
        return "Create the embedding_stale SQL function"


class EmbeddingStaleStatistics(migrations.operations.base.Operation):
    """Statistics on ``embedding_stale`` of a model's rows (then ANALYZE): PostgreSQL then knows how few rows are
    stale, and reads the partial index of ``embedding_work_indexes`` for the backfill's batches instead of walking
    every row by id. Without them it guesses a third of the table is stale whatever the data."""

    reversible = True

    def __init__(self, model_name: str, text_field: str):
        self.model_name = model_name
        self.text_field = text_field

    def deconstruct(self):
        return self.__class__.__name__, [], {"model_name": self.model_name, "text_field": self.text_field}

    def state_forwards(self, app_label, state):
        pass

    def _names(self, app_label, state, schema_editor) -> tuple[str, str, str]:
        meta = state.apps.get_model(app_label, self.model_name)._meta
        quote = schema_editor.connection.ops.quote_name
        return quote(meta.db_table), quote(f"{meta.db_table}_emb_stale_stats"), quote(meta.get_field(self.text_field).column)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        table, name, text = self._names(app_label, to_state, schema_editor)
        schema_editor.execute(
            f"CREATE STATISTICS IF NOT EXISTS {name} ON (embedding_stale(embedding, embedding_hash, {text})) FROM {table}"
        )
        schema_editor.execute(f"ANALYZE {table}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {self._names(app_label, from_state, schema_editor)[1]}")

    def describe(self):
        return f"Create statistics on embedding_stale of {self.model_name}"
