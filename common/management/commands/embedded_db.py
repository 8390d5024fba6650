from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
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
        try:
            if action == "start":
                self.stdout.write(f"running, socket in {embedded_db.ensure_server(pgdata)}")
            elif action == "stop":
                self.stdout.write("stopped" if embedded_db.stop_server(pgdata) else "was not running")
            else:
                info = embedded_db.server_running(pgdata)
                self.stdout.write(f"running (pid {info.pid})" if info else "not running")
        except (RuntimeError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
