"""Arguments shared by commands of several apps: each refuses bad input with a CommandError naming the argument."""

import re

from django.core.management.base import CommandError

from common.validation import MAX_DAYS


def days_argument(value: str | None, *, option: str = "--older-than") -> int | None:
    """Days given as ``90`` or ``90d`` (None: the setting's default), 1 to MAX_DAYS, else CommandError."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]{1,6})\s*d?\s*", value)
    if not m or not 1 <= int(m.group(1)) <= MAX_DAYS:
        raise CommandError(f"{option} takes days from 1 to {MAX_DAYS}, such as 90d or 90 (got {value!r}).")
    return int(m.group(1))
