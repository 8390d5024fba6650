"""Checks shared by the memories commands: each refuses bad input with a CommandError naming the argument."""

import re

from django.core.management.base import CommandError

from common.validators import USER_ID_RE

SEARCH_MAX_LIMIT = 1000
EMBED_MAX_BATCH = 10_000


def user_checked(user_id: str | None) -> str | None:
    """``--user`` as given, or CommandError when it is not a user id."""
    if user_id is not None and not re.fullmatch(USER_ID_RE, user_id):
        raise CommandError("Malformed --user id.")
    return user_id


def bounded(value: int, *, option: str, high: int) -> int:
    """``value`` when 1 <= value <= ``high``, else CommandError naming ``option``."""
    if not 1 <= value <= high:
        raise CommandError(f"{option} must be between 1 and {high} (got {value}).")
    return value
