"""A small, deterministic JSON diff used as a feedback record's ``correction_delta``."""

from typing import Any


def json_delta(original: Any, corrected: Any) -> dict:
    """What changed from ``original`` to ``corrected``.

    Objects are compared key by key (nested keys get dotted paths); any other
    value, lists included, is compared as a whole. The answer is
    ``{"added": {path: new}, "removed": {path: old}, "changed": {path: {"from": old, "to": new}}}``.
    """
    delta: dict[str, dict] = {"added": {}, "removed": {}, "changed": {}}
    _walk(original, corrected, "", delta)
    return delta


def _walk(a: Any, b: Any, path: str, delta: dict) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a:
                delta["added"][sub] = b[key]
            elif key not in b:
                delta["removed"][sub] = a[key]
            else:
                _walk(a[key], b[key], sub, delta)
        return
    if a != b or type(a) is not type(b):
        delta["changed"][path or "$"] = {"from": a, "to": b}


def delta_is_empty(delta: dict) -> bool:
    return not (delta["added"] or delta["removed"] or delta["changed"])


def json_clean(value):
    """The value with NUL characters removed from every string and key (PostgreSQL jsonb cannot store them)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): json_clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_clean(v) for v in value]
    return value
