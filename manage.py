#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys
import traceback

SETTINGS_FILE = os.path.join("config", "settings.py")


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db import OperationalError, ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # a setting missing or out of range (SECRET_KEY without DEBUG=1, a number it cannot read): one line naming
        # it; raised anywhere else (an app's code), the traceback says where
        if not any(frame.f_code.co_filename.endswith(SETTINGS_FILE) for frame, _ in traceback.walk_tb(exc.__traceback__)):
            raise
        sys.stderr.write(f"Configuration: {exc}\n")
        sys.exit(1)
    except OperationalError as exc:
        # a database that cannot be reached, refuses the login or does not exist: one line, not a traceback; any other
        # operational error (a lock or statement timeout, a deadlock) keeps its traceback, which names the statement
        sqlstate = getattr(getattr(exc, "__cause__", None), "sqlstate", None)
        if sqlstate is not None and not sqlstate.startswith(("08", "28", "3D", "57P")):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        sys.stderr.write(f"Database unavailable: {first}\n")
        sys.exit(1)
    except ProgrammingError as exc:
        if getattr(getattr(exc, "__cause__", None), "sqlstate", None) != "42P01":  # undefined_table
            raise
        first = str(exc).strip().splitlines()[0]
        sys.stderr.write(f"The database is not migrated ({first}): run `.venv/bin/python manage.py migrate` first.\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
