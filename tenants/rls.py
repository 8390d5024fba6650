"""Row-level security: PostgreSQL shows a tenant-owned row only to a scope that includes its tenant.

Every tenant-owned table (and its history table) gets ``ENABLE`` and ``FORCE ROW LEVEL SECURITY`` (so the
table owner, the app's own role, is bound too) and one policy that reads ``app.tenant_ids``
(``tenants/context.py``). Superusers and roles with BYPASSRLS skip every policy: the app must connect as a
role that is neither (docs/tenants.md).
"""

from contextlib import contextmanager

from django.db import migrations

FUNCTIONS_SQL = """
CREATE OR REPLACE FUNCTION tenants_scope() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('app.tenant_ids', true), '')
$$;
CREATE OR REPLACE FUNCTION tenants_ids() RETURNS bigint[] LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s ~ '^[0-9]+(,[0-9]+)*$' THEN string_to_array(s, ',')::bigint[] ELSE '{}'::bigint[] END
    FROM tenants_scope() AS s
$$;
CREATE OR REPLACE FUNCTION tenants_current_id() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN s ~ '^[0-9]+$' THEN s::bigint
        WHEN s ~ ',' THEN NULL
        ELSE (SELECT id FROM tenants_tenant WHERE slug = 'default')
    END
    FROM tenants_scope() AS s
$$;
"""

FUNCTIONS_DROP_SQL = """
DROP FUNCTION IF EXISTS tenants_inherit();
DROP FUNCTION IF EXISTS tenants_current_id();
DROP FUNCTION IF EXISTS tenants_ids();
DROP FUNCTION IF EXISTS tenants_scope();
"""

POLICY = "tenant_isolation"
# Each function in a scalar subquery: PostgreSQL evaluates it once per statement (an InitPlan), not once per row
# read (a regular expression and an array parse per row: 0.2 ms of a 77-row scan, far more on bulk reads).
VISIBLE = "((SELECT tenants_scope()) = '*' OR tenant_id = ANY ((SELECT tenants_ids())::bigint[]))"


def policy_sql(table: str) -> str:
    return (
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY; '
        f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY; '
        f'DROP POLICY IF EXISTS {POLICY} ON "{table}"; '
        f'CREATE POLICY {POLICY} ON "{table}" USING {VISIBLE} WITH CHECK {VISIBLE};'
    )


def inherit_function_name(table: str) -> str:
    return f"tenants_inherit_{table}"[:63]


def inherit_trigger_sql(table: str, parent_table: str, fk_column: str, parent_key: str) -> str:
    """The trigger that gives a new row of ``table`` its parent's tenant outside a one-tenant scope.

    One function per table with its parent's lookup written out (a plan PostgreSQL prepares once), and a WHEN
    clause so a one-tenant scope, or a row without a parent, never enters PL/pgSQL at all: bulk inserts of tens of
    thousands of rows (a set-based autonomy cycle) pay microseconds per row, not a dynamic query each."""
    fn = inherit_function_name(table)
    return f"""
CREATE OR REPLACE FUNCTION "{fn}"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    parent_tenant bigint;
BEGIN
    SELECT tenant_id INTO parent_tenant FROM "{parent_table}" WHERE "{parent_key}" = NEW."{fk_column}";
    IF parent_tenant IS NOT NULL THEN
        NEW.tenant_id := parent_tenant;
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS tenant_inherit ON "{table}";
CREATE TRIGGER tenant_inherit BEFORE INSERT ON "{table}" FOR EACH ROW
    WHEN (NEW."{fk_column}" IS NOT NULL AND tenants_scope() !~ '^[0-9]+$')
    EXECUTE FUNCTION "{fn}"();
"""


def inherit_trigger_drop_sql(table: str) -> str:
    return f'DROP TRIGGER IF EXISTS tenant_inherit ON "{table}"; DROP FUNCTION IF EXISTS "{inherit_function_name(table)}"();'


def inherit_triggers_rewrite(apps, schema_editor) -> None:
    """Replace triggers that call the generic ``tenants_inherit(parent, fk, key)`` of earlier installs (a dynamic
    query per row) with the per-table ones of ``inherit_trigger_sql``, then drop the generic function."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, encode(t.tgargs, 'escape') FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgname = 'tenant_inherit' AND p.proname = 'tenants_inherit'"
        )
        rows = cursor.fetchall()
    for table, args in rows:
        parent_table, fk_column, parent_key = args.split("\\000")[:3]
        schema_editor.execute(inherit_trigger_sql(table, parent_table, fk_column, parent_key))
    schema_editor.execute("DROP FUNCTION IF EXISTS tenants_inherit()")


def policies_rewrite(apps, schema_editor) -> None:
    """Re-create the policy of every table that has one with the current ``VISIBLE``."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND p.polname = %s ORDER BY 1",
            [POLICY],
        )
        tables = [row[0] for row in cursor.fetchall()]
    for table in tables:
        schema_editor.execute(policy_sql(table))


def policy_drop_sql(table: str) -> str:
    return (
        f'DROP POLICY IF EXISTS {POLICY} ON "{table}"; '
        f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY; '
        f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY;'
    )


class EnableTenantRLS(migrations.operations.base.Operation):
    """Turn row-level security on for a model's table and, when it has one, its history table."""

    reversible = True

    def __init__(self, model_name: str):
        self.model_name = model_name

    def deconstruct(self):
        return self.__class__.__name__, [], {"model_name": self.model_name}

    def state_forwards(self, app_label, state):
        pass

    def _tables(self, app_label, state) -> list[str]:
        apps = state.apps
        tables = [apps.get_model(app_label, self.model_name)._meta.db_table]
        try:
            tables.append(apps.get_model(app_label, f"Historical{self.model_name}")._meta.db_table)
        except LookupError:
            pass
        return tables

    def _parent(self, app_label, state):
        """(table, FK column, parent key column) of the first foreign key to a model with a tenant, or None."""
        model = state.apps.get_model(app_label, self.model_name)
        fields = [f for f in model._meta.fields if f.is_relation and f.many_to_one and f.name != "tenant"]
        fields.sort(key=lambda f: f.null)  # a required parent first
        for field in fields:
            target = field.related_model
            if any(f.name == "tenant" for f in target._meta.fields):
                return target._meta.db_table, field.column, field.target_field.column
        return None

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        tables = self._tables(app_label, to_state)
        for table in tables:
            schema_editor.execute(policy_sql(table))
        parent = self._parent(app_label, to_state)
        if parent is not None:
            schema_editor.execute(inherit_trigger_sql(tables[0], *parent))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        tables = self._tables(app_label, from_state)
        schema_editor.execute(inherit_trigger_drop_sql(tables[0]))
        for table in tables:
            schema_editor.execute(policy_drop_sql(table))

    def describe(self):
        return f"Row-level security by tenant on {self.model_name}"


def tenant_owned_tables(connection) -> list[str]:
    """Every table in the current schema with a tenant_id column (what must carry the policy)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND column_name = 'tenant_id' ORDER BY table_name"
        )
        return [row[0] for row in cursor.fetchall()]


def tables_with_rls(connection) -> set[str]:
    """Tables with row-level security both enabled and forced."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relrowsecurity AND c.relforcerowsecurity"
        )
        return {row[0] for row in cursor.fetchall()}


@contextmanager
def every_tenant(connection):
    """For a data migration: every tenant's rows in scope (``app.tenant_ids`` = ``*``, local to the migration's
    transaction), then the previous scope back."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('app.tenant_ids', true)")
        previous = cursor.fetchone()[0] or ""
        cursor.execute("SELECT set_config('app.tenant_ids', '*', true)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('app.tenant_ids', %s, true)", [previous])
