"""DATABASE_URL route: a PostgreSQL without pgvector is refused in one clear line.

The machine's PostgreSQL 15 on 127.0.0.1:5432 (CI has it too) has no pgvector.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture
def external_db():
    try:
        admin = psycopg.connect(SERVER, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.fail(f"this test needs the machine's PostgreSQL on 127.0.0.1:5432 (trust auth): {exc}")
    available = admin.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    name = f"alg_ext_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    yield name, bool(available)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def test_migrate_without_pgvector_says_so_in_one_line(external_db):
    name, has_vector = external_db
    env = dict(os.environ, DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{name}")
    env.pop("TEST_DATABASE_NAME", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if has_vector:
        assert result.returncode == 0, result.stderr[-2000:]
        return
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("CommandError: PostgreSQL has no pgvector extension")
    assert len([line for line in lines if "pgvector" in line]) == 1
