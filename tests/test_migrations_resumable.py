"""A migration that builds indexes concurrently completes when it runs again after an interruption: the indexes
built before it are kept, an INVALID one (the build that was interrupted) is dropped and built again."""

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from common.migration_ops import AddIndexConcurrentlyResumable, index_valid

pytestmark = pytest.mark.django_db(transaction=True)  # concurrent builds run outside a transaction

NAME = "learnedphrase_active"


def _operation_and_states():
    loader = MigrationLoader(connection)
    key = ("learning", "0019_learnedphrase_active")
    migration = loader.graph.nodes[key]
    op = next(o for o in migration.operations if isinstance(o, AddIndexConcurrentlyResumable))
    before = loader.project_state([("learning", "0018_resolution_outcome_choices")])
    after = loader.project_state([key])
    return op, before, after


def _run(op, before, after):
    with connection.schema_editor(atomic=False) as editor:
        op.database_forwards("learning", editor, before, after)


def _definition() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [NAME])
        return cursor.fetchone()[0]


def test_an_invalid_index_left_by_an_interrupted_build_is_built_again():
    op, before, after = _operation_and_states()
    built = _definition()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX CONCURRENTLY {NAME}")
            # a concurrent build that fails half way leaves its index INVALID: a unique one over duplicates does
            cursor.execute("CREATE TABLE scratch_dupes (n int)")
            cursor.execute("INSERT INTO scratch_dupes VALUES (1), (1)")
            with pytest.raises(Exception, match="could not create unique index"):
                cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {NAME} ON scratch_dupes (n)")
        assert index_valid(connection, NAME) is False

        _run(op, before, after)

        assert index_valid(connection, NAME) is True
        assert _definition() == built  # the migration's own index, on its table
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS scratch_dupes")  # drops the invalid index with it, if still there
        if index_valid(connection, NAME) is not True:
            _run(op, before, after)
    assert _definition() == built


def test_an_index_built_before_the_interruption_is_kept():
    op, before, after = _operation_and_states()
    with connection.cursor() as cursor:
        cursor.execute("SELECT oid FROM pg_class WHERE relname = %s", [NAME])
        oid = cursor.fetchone()[0]
    _run(op, before, after)  # Django's own operation fails here: the relation already exists
    with connection.cursor() as cursor:
        cursor.execute("SELECT oid FROM pg_class WHERE relname = %s", [NAME])
        assert cursor.fetchone()[0] == oid  # the same index, not built again
    assert index_valid(connection, NAME) is True


def test_every_concurrent_index_migration_can_run_again():
    """No migration of the project builds an index concurrently with Django's operation, which fails on a re-run."""
    from django.contrib.postgres.operations import AddIndexConcurrently

    loader = MigrationLoader(connection)
    plain = [
        f"{app}.{name}"
        for (app, name), migration in loader.graph.nodes.items()
        if not app.startswith(("django", "auth", "contenttypes", "admin", "sessions"))
        for op in migration.operations
        if type(op) is AddIndexConcurrently
    ]
    assert plain == []
