"""A small, deterministic JSON diff used as a feedback record's ``correction_delta``."""

import json
from typing import Any


def json_delta(original: Any, corrected: Any) -> dict:
    """What changed from ``original`` to ``corrected``.

    Objects are compared key by key (nested keys get dotted paths; a key that is empty, ``$`` or holds a dot, a
    bracket or a quote is written ``["a.b"]``, so two keys never share a path); any other
    value, lists included, is compared as a whole. The answer is
    ``{"added": {path: new}, "removed": {path: old}, "changed": {path: {"from": old, "to": new}}}``.
    """
    delta: dict[str, dict] = {"added": {}, "removed": {}, "changed": {}}
    _walk(original, corrected, "", delta)
    return delta


def _walk(a: Any, b: Any, path: str, delta: dict) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = _path(path, str(key))
            if key not in a:
                delta["added"][sub] = b[key]
            elif key not in b:
                delta["removed"][sub] = a[key]
            else:
                _walk(a[key], b[key], sub, delta)
        return
    if not json_equal(a, b):
        delta["changed"][path or "$"] = {"from": a, "to": b}


def _path(path: str, key: str) -> str:
    if key in ("", "$") or any(c in key for c in '.[]"'):
        return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{path}.{key}" if path else key


def json_equal(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same, as JSON (and PostgreSQL's jsonb) reads them: 1 and 1.0 are one number,
    ``true`` is no number (Python's ``True == 1`` is not JSON's), lists compare item by item, objects key by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


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
