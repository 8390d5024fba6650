"""Checks of values shared by several apps' services."""

import math

from common.api import ApplicationError

MAX_DAYS = 36500  # the longest window, retention or age anywhere (a century): further back date arithmetic leaves the calendar


def confidence_validate(value, *, field: str = "confidence") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApplicationError("Confidence must be a number in [0, 1].", field=field)
    if not 0.0 <= float(value) <= 1.0:
        raise ApplicationError(f"Confidence must be in [0, 1], not {value}.", field=field)
    return float(value)
