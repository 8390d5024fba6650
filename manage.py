#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db import OperationalError, ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:  # a database that refuses, times out or is not there: one line, not a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        sys.stderr.write(f"Database unavailable: {first}\n")
        sys.exit(1)
    except ProgrammingError as exc:
        if getattr(getattr(exc, "__cause__", None), "sqlstate", None) != "42P01":  # undefined_table
            raise
        first = str(exc).strip().splitlines()[0]
        sys.stderr.write(f"The database is not migrated ({first}): run `python manage.py migrate` first.\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
