"""Django's PostgreSQL backend, plus the embedded server when no DATABASE_URL is set.

With ``EMBEDDED_PGDATA`` in the database settings, the first connection of a
process starts (or finds) the embedded server and creates the database; no
work happens when settings are merely imported. Every connection runs with
pgvector's iterative index scans so filtered vector queries never come back
short.
"""

from django.db.backends.postgresql import base

from common import embedded_db


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        pgdata = self.settings_dict.get("EMBEDDED_PGDATA")
        if pgdata:
            socket_dir = embedded_db.ensure_server(pgdata)
            self.settings_dict["HOST"] = socket_dir
            name = self.settings_dict["NAME"] or "postgres"
            embedded_db.ensure_database(socket_dir, name, self.settings_dict.get("USER") or embedded_db.APP_ROLE)
        return super().get_connection_params()
