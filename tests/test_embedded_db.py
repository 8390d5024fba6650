"""The embedded server: started once when many processes start at once; survives kill -9 with committed data."""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import psycopg
import pytest

from common import embedded_db

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def pgdata():
    base = ROOT / "var" / f"test-embedded-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    path = base / "pgdata"
    yield path
    try:
        embedded_db.stop_server(path)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def postmasters(pgdata: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(attrs=["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(pgdata) in " ".join(cmd) and "-D" in cmd:
            found.append(proc)
    return found


START = (
    "import sys; sys.path.insert(0, {root!r}); from common import embedded_db; "
    "s = embedded_db.ensure_server({pgdata!r}); embedded_db.ensure_database(s, 'racey'); print(s)"
)


def test_many_processes_starting_at_once_share_one_server(pgdata):
    code = START.format(root=str(ROOT), pgdata=str(pgdata))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    sockets = {stdout.strip() for stdout, _ in outputs}
    assert len(sockets) == 1
    assert len(postmasters(pgdata)) == 1
    with psycopg.connect(host=sockets.pop(), dbname="racey", user="postgres") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_killed_server_restarts_without_losing_committed_rows(pgdata):
    socket_dir = embedded_db.ensure_server(pgdata)
    embedded_db.ensure_database(socket_dir, "durable")
    with psycopg.connect(host=socket_dir, dbname="durable", user="postgres", autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v text)")
        conn.execute("INSERT INTO t VALUES ('committed')")
    (postmaster,) = postmasters(pgdata)
    os.kill(postmaster.pid, signal.SIGKILL)
    postmaster.wait(10)
    time.sleep(0.5)
    embedded_db._ready.clear()  # as a fresh process would
    socket_dir = embedded_db.ensure_server(pgdata)
    with psycopg.connect(host=socket_dir, dbname="durable", user="postgres") as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [("committed",)]


def test_a_database_made_by_the_superuser_is_handed_to_the_apps_role(pgdata):
    """Databases of older versions were owned by postgres: the app's role takes them over on first use."""
    socket_dir = embedded_db.ensure_server(pgdata)
    with psycopg.connect(host=socket_dir, dbname="postgres", user="postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE legacy")
    with psycopg.connect(host=socket_dir, dbname="legacy", user="postgres", autocommit=True) as conn:
        conn.execute("CREATE TABLE learning_verb (id bigserial PRIMARY KEY, name text)")
    embedded_db.ensure_database(socket_dir, "legacy", embedded_db.APP_ROLE)
    with psycopg.connect(host=socket_dir, dbname="legacy", user=embedded_db.APP_ROLE, autocommit=True) as conn:
        owner = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'learning_verb'").fetchone()
        role = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        conn.execute("INSERT INTO learning_verb (name) VALUES ('cbu.list')")  # owns it: may write, sequence included
        extension = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert owner == (embedded_db.APP_ROLE,) and role == (False, False) and extension == (1,)


def test_shared_buffers_follow_the_setting_and_a_bad_value_changes_nothing(monkeypatch):
    """The embedded server's shared_buffers: a quarter of memory between 128 MB and 4 GB unless set; the server
    in use already has the wanted value (nothing to do), and a value PostgreSQL cannot read is reported, not applied."""
    from django.conf import settings

    socket_dir = embedded_db.ensure_server(settings.DATABASES["default"]["EMBEDDED_PGDATA"])
    monkeypatch.delenv("EMBEDDED_DB_SHARED_BUFFERS", raising=False)
    wanted = embedded_db.shared_buffers_wanted()
    assert wanted.endswith("MB") and 128 <= int(wanted[:-2]) <= 4096
    assert embedded_db._memory_tune(socket_dir) is False  # the running server was started with it
    monkeypatch.setenv("EMBEDDED_DB_SHARED_BUFFERS", "plenty")
    assert embedded_db._memory_tune(socket_dir) is False
    with psycopg.connect(host=socket_dir, dbname="postgres", user=embedded_db.SUPERUSER, autocommit=True) as conn:
        assert (
            conn.execute("SELECT count(*) FROM pg_file_settings WHERE name = 'shared_buffers' AND setting = 'plenty'").fetchone()[
                0
            ]
            == 0
        )


def test_a_pid_file_naming_another_process_is_set_aside_and_that_process_is_never_signalled(pgdata):
    """After an unclean stop the pid in postmaster.pid may belong to another process by the next start."""
    socket_dir = embedded_db.ensure_server(pgdata)
    (postmaster,) = postmasters(pgdata)
    os.kill(postmaster.pid, signal.SIGKILL)
    postmaster.wait(10)
    time.sleep(0.5)
    bystander = subprocess.Popen(["sleep", "120"])
    try:
        pid_file = pgdata / "postmaster.pid"
        lines = pid_file.read_text().splitlines()
        pid_file.write_text("\n".join([str(bystander.pid), *lines[1:]]) + "\n")
        embedded_db._ready.clear()  # as a fresh process would
        assert embedded_db.server_running(pgdata) is None and embedded_db.stop_server(pgdata) is False
        socket_dir = embedded_db.ensure_server(pgdata)  # starts the server, the stale file set aside
        with psycopg.connect(host=socket_dir, dbname="postgres", user="postgres") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert (pgdata / "postmaster.pid.stale").exists() and len(postmasters(pgdata)) == 1
        assert embedded_db.stop_server(pgdata) is True
        assert bystander.poll() is None  # never signalled
    finally:
        bystander.kill()
        bystander.wait()


def test_a_data_directory_that_cannot_be_made_stops_with_a_message(tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with pytest.raises(ImproperlyConfigured, match="cannot use .*a-file"):
        embedded_db.ensure_server(blocked / "pgdata")
