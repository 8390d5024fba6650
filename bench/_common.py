"""Shared helpers for the benchmarks: Django setup, machine description, RESULTS.md."""

import datetime
import os
import platform
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"


def setup_django(db_name: str | None = None) -> None:
    """Configure Django on the embedded default; benchmarks use their own database."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # DEBUG off, as in production, whatever the shell exports: with it on, Django keeps every query and its SQL,
    # which costs a measurable share of a resolve; the benchmark's own key and hosts stand in for production's
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", os.urandom(24).hex())
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    if db_name and not os.environ.get("DATABASE_URL"):
        os.environ["EMBEDDED_DB_NAME"] = db_name
    import django

    django.setup()


# The project's apps: fresh_database empties their tables (Django's own, such as users, are kept).
APPS = ("common", "agents", "embeddings", "learning", "memories", "actions", "feedback", "autonomy", "review")


def fresh_database() -> None:
    """Migrate the benchmark database and empty the project's tables."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname='public' AND tablename LIKE ANY(%s)",
            [[f"{app}\\_%" for app in APPS]],
        )
        tables = [r[0] for r in cur.fetchall()]
        if tables:
            cur.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({os.cpu_count()} cores, {cpu}, Python {platform.python_version()})"


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def record(name: str, body: str, result_line: str) -> None:
    """Append a dated section to bench/RESULTS.md and print the RESULT line last."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with open(RESULTS, "a", encoding="utf-8") as fh:
        fh.write(f"\n## {name} — {stamp} — {machine()}\n\n{body}\n\n`{result_line}`\n")
    print(result_line)


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_gunicorn(db_name: str, *, workers: int = 1, threads: int = 1, extra_env: dict | None = None):
    """gunicorn serving the app on a free loopback port and the given database, configured as in production
    (DEBUG off: Django does not log every query and its SQL, which costs milliseconds a request); answers
    (process, port). Stop it with ``stop_gunicorn``."""
    import socket
    import subprocess
    import time

    port = free_port()
    env = dict(os.environ, EMBEDDED_DB_NAME=db_name, DJANGO_SETTINGS_MODULE="config.settings", LOG_LEVEL="WARNING")
    env.update(DEBUG="0", SECRET_KEY=os.urandom(24).hex(), ALLOWED_HOSTS="127.0.0.1,localhost")
    env.update(extra_env or {})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--threads",
            str(threads),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not start")


def stop_gunicorn(proc) -> None:
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)


@contextmanager
def rls_lifted(table: str):
    """PostgreSQL refuses COPY FROM under row-level security: the table's owner (the app's role) bulk-loads with the
    policy lifted for the load only (rows take the default tenant), and it is put back even if the load fails."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY')
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute(f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY')


@contextmanager
def prior_refit_held():
    """Hold back the catalogue prior refit that catalogue loads and global imports queue (eager here, with no
    broker): the benchmark fits the prior itself, once, and times it apart from the load or the import."""
    from common import tasks

    send = tasks.task_send

    def held(task, *args, **kwargs):
        name = task if isinstance(task, str) else task.name
        return False if name == "learning.decision_prior_fit" else send(task, *args, **kwargs)

    tasks.task_send = held
    try:
        yield
    finally:
        tasks.task_send = send
