"""Triggers that stamp a tenant's catalogue with a new version whenever its verbs or catalogue phrases change.

Statement-level, with transition tables: one bulk load of ten thousand phrases is one upsert per tenant it
touched, not one per row. Versions come from one sequence that nothing resets (a TRUNCATE of the tables, as
test databases do, cannot bring an old version back), so a version never repeats."""

TABLES = ("learning_verb", "learning_verbphrase")

FUNCTION_SQL = """
CREATE SEQUENCE IF NOT EXISTS learning_catalogue_version;
CREATE OR REPLACE FUNCTION learning_catalogue_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE learning_cataloguestamp SET version = nextval('learning_catalogue_version');
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO learning_cataloguestamp (tenant_id, version)
        SELECT tenant_id, nextval('learning_catalogue_version') FROM (SELECT DISTINCT tenant_id FROM changed) t
        ON CONFLICT (tenant_id) DO UPDATE SET version = EXCLUDED.version;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO learning_cataloguestamp (tenant_id, version)
        SELECT tenant_id, nextval('learning_catalogue_version')
        FROM (SELECT tenant_id FROM changed UNION SELECT tenant_id FROM gone) t
        ON CONFLICT (tenant_id) DO UPDATE SET version = EXCLUDED.version;
    ELSE
        INSERT INTO learning_cataloguestamp (tenant_id, version)
        SELECT tenant_id, nextval('learning_catalogue_version') FROM (SELECT DISTINCT tenant_id FROM gone) t
        ON CONFLICT (tenant_id) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    RETURN NULL;
END
$$;
"""


def triggers_sql(table: str) -> str:
    return f"""
CREATE TRIGGER catalogue_touch_insert AFTER INSERT ON "{table}" REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION learning_catalogue_touch();
CREATE TRIGGER catalogue_touch_update AFTER UPDATE ON "{table}" REFERENCING OLD TABLE AS gone NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION learning_catalogue_touch();
CREATE TRIGGER catalogue_touch_delete AFTER DELETE ON "{table}" REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION learning_catalogue_touch();
CREATE TRIGGER catalogue_touch_truncate AFTER TRUNCATE ON "{table}"
    FOR EACH STATEMENT EXECUTE FUNCTION learning_catalogue_touch();
"""


def triggers_drop_sql(table: str) -> str:
    return "".join(
        f'DROP TRIGGER IF EXISTS catalogue_touch_{event} ON "{table}";' for event in ("insert", "update", "delete", "truncate")
    )


INSTALL_SQL = FUNCTION_SQL + "".join(triggers_sql(t) for t in TABLES)
REMOVE_SQL = (
    "".join(triggers_drop_sql(t) for t in TABLES)
    + "DROP FUNCTION IF EXISTS learning_catalogue_touch(); DROP SEQUENCE IF EXISTS learning_catalogue_version;"
)
