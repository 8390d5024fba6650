"""Parsing of bulk phrase imports (YAML, JSON, CSV) into ``ImportRow``s.

Pure functions, no database. Files are bounded in size, rows and nesting; YAML is read
with a safe loader that refuses anchors and aliases, so a "billion laughs"
document cannot expand. Texts follow the API's input policy (no NUL, no lone
surrogate: ``common.parsers.text_problem``). Every problem names the row it was found in.
"""

import csv
import io
import json
from dataclasses import dataclass

import yaml
from django.conf import settings

from common.parsers import text_problem

FORMATS = ("yaml", "json", "csv")
REQUIRED_COLUMNS = ("phrase", "verb")


class ImportFormatError(ValueError):
    """The file as a whole cannot be read (size, syntax, shape, missing column)."""


@dataclass(frozen=True)
class ImportRow:
    number: int  # 1-based; for CSV the data row number (the header is not counted)
    phrase: str
    verb: str


_TOO_DEEP = "The file is nested too deeply; an import is a flat list of rows or a mapping of verbs to phrases"


class NoAliasLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases: YAML bombs are refused before anything expands; and no deeper than
    API_MAX_JSON_DEPTH levels, refused while composing (PyYAML composes recursively). Refusals raise
    ImportFormatError; ``too_deep`` words the depth refusal."""

    depth = 0
    too_deep = _TOO_DEEP

    # Phrases are text: an unquoted yes, off, 3.10, 0755 or 12:30 is not true, false, 3.1, 493 (octal) or 750
    # (base 60) to print back as other words, nor 2024-02-30 a date to construct (and fail on). Only null is read.
    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag == "tag:yaml.org,2002:null"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen = set()
        for key, _value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:  # PyYAML keeps the last silently: which one was meant?
                    raise ImportFormatError(
                        f"The key {key.value!r} appears twice in one mapping (line {key.start_mark.line + 1})."
                    )
                seen.add(key.value)
        return node

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise ImportFormatError(f"YAML anchors and aliases are not allowed (line {event.start_mark.line + 1}).")
        if self.depth >= settings.API_MAX_JSON_DEPTH:
            raise ImportFormatError(f"{self.too_deep} (line {event.start_mark.line + 1}).")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def check_size(size: int) -> None:
    limit = settings.LEARNING_IMPORT_MAX_BYTES
    if size > limit:
        raise ImportFormatError(f"The import is {size} bytes; the limit is {limit} bytes.")


def parse(content: str | bytes, fmt: str) -> list[ImportRow]:
    """Rows of an import file. Raises ImportFormatError for a file that cannot be read as a whole."""
    if fmt not in FORMATS:
        raise ImportFormatError(f"Unknown format {fmt!r}; use one of {', '.join(FORMATS)}.")
    if isinstance(content, bytes):
        check_size(len(content))
        try:
            content = content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ImportFormatError(f"The file is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    else:
        check_size(len(content.encode("utf-8")))
        content = content.removeprefix("\ufeff")  # a byte-order mark a text editor left, as utf-8-sig drops it
    if fmt == "csv":
        rows = _parse_csv(content)
    else:
        rows = _records(_parse_yaml(content) if fmt == "yaml" else _parse_json(content))
    if not rows:
        raise ImportFormatError("The import holds no rows.")
    if len(rows) > settings.LEARNING_IMPORT_MAX_ROWS:
        raise ImportFormatError(
            f"The import holds {len(rows)} rows, more than the limit of {settings.LEARNING_IMPORT_MAX_ROWS} "
            "(LEARNING_IMPORT_MAX_ROWS): split the file."
        )
    return rows


def _unique_keys(pairs: list) -> dict:
    keys = [key for key, _value in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:  # json keeps the last silently: which one was meant?
        raise ImportFormatError(f"The key(s) {', '.join(map(repr, twice))} appear twice in one object.")
    return dict(pairs)


def _parse_json(content: str):
    try:
        data = json.loads(content, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"Invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}.") from None
    except RecursionError:
        raise ImportFormatError(f"{_TOO_DEEP}.") from None
    except ImportFormatError:
        raise
    except ValueError:  # a number with more digits than Python reads
        raise ImportFormatError("Invalid JSON: a number too long to read; quote long numbers as text.") from None
    _check_depth(data, settings.API_MAX_JSON_DEPTH)
    return data


def _check_depth(data, limit: int) -> None:
    """Refuse nesting deeper than ``limit`` levels (the YAML loader's rule, for JSON; iterative)."""
    stack = [(data, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            if level > limit:
                raise ImportFormatError(f"{_TOO_DEEP} (more than {limit} levels).")
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))


def _parse_yaml(content: str):
    loader = None
    try:
        loader = NoAliasLoader(content)  # its reader refuses characters YAML does not allow, here already
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ImportFormatError(f"Invalid YAML: {exc}".replace("\n", " ")) from None
    except RecursionError:
        raise ImportFormatError(f"{_TOO_DEEP}.") from None
    except ImportFormatError:
        raise
    except (ValueError, OverflowError):  # a scalar YAML reads as a number it cannot build
        raise ImportFormatError("Invalid YAML: a value read as a number is too long to read; quote it as text.") from None
    finally:
        if loader is not None:
            loader.dispose()


def _unknown(keys, n: int | None = None) -> None:
    """Refuse keys or columns besides phrase and verb: a ``user_id`` or ``scope`` there would be dropped, and rows
    meant for one user would be imported for everyone (the scope is the request's or the command's)."""
    unknown = sorted(str(k) for k in keys if k not in REQUIRED_COLUMNS)
    if unknown:
        where = f"Row {n}: " if n is not None else ""
        raise ImportFormatError(
            f"{where}unknown field(s) {', '.join(map(repr, unknown))}: a row holds only phrase and verb (the scope and "
            "user are the import's own: scope and user_id in the request, --user-id for the command)."
        )


def _records(data) -> list[ImportRow]:
    """Accepts a list of {phrase, verb} mappings, or {"phrases": [...]}, or {verb: [phrases]}."""
    if isinstance(data, dict) and isinstance(data.get("phrases"), list):
        others = sorted(str(k) for k in data if k != "phrases")
        if others:
            raise ImportFormatError(f"Unknown key(s) {', '.join(map(repr, others))} beside 'phrases'.")
        data = data["phrases"]
    if isinstance(data, dict):
        rows, n = [], 0
        for verb, phrases in data.items():
            if not isinstance(phrases, list):
                raise ImportFormatError(f"Under verb {verb!r} expected a list of phrases.")
            for phrase in phrases:
                n += 1
                rows.append(ImportRow(n, _text(phrase, n, "phrase"), _text(verb, n, "verb")))
        return rows
    if not isinstance(data, list):
        raise ImportFormatError("Expected a list of {phrase, verb} rows.")
    rows = []
    for n, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            raise ImportFormatError(f"Row {n}: expected a mapping with 'phrase' and 'verb'.")
        missing = [c for c in REQUIRED_COLUMNS if c not in item]
        if missing:
            raise ImportFormatError(f"Row {n}: missing {', '.join(missing)}.")
        _unknown(item, n)
        rows.append(ImportRow(n, _text(item["phrase"], n, "phrase"), _text(item["verb"], n, "verb")))
    return rows


def _text(value, n: int, name: str) -> str:
    """A row's phrase or verb as text: strings, and whole numbers as written (JSON's ``911``; YAML reads every plain
    scalar as text). true, false and other numbers are refused (JSON's ``3.10`` would come back as 3.1): quote
    them. Bytes and collections are refused."""
    if value is None:
        return ""
    if isinstance(value, (dict, list, bytes, bool, float)):
        raise ImportFormatError(f"Row {n}: the {name} must be text; quote it (true, false and decimals are not).")
    try:
        text = str(value)
    except ValueError:  # an integer with more digits than Python prints
        raise ImportFormatError(f"Row {n}: the {name} is a number too long to print; quote it as text.") from None
    return _checked(text.strip(), n, name)


def _checked(text: str, n: int, name: str) -> str:
    problem = text_problem(text)
    if problem:
        raise ImportFormatError(f"Row {n}: the {name} {problem}.")
    return text


def _parse_csv(content: str) -> list[ImportRow]:
    reader = csv.DictReader(io.StringIO(content, newline=""))
    try:
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise ImportFormatError(f"Invalid CSV header: {exc}.") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ImportFormatError(f"CSV is missing the column(s): {', '.join(missing)} (header: {', '.join(header) or 'empty'}).")
    twice = sorted({c for c in header if c and header.count(c) > 1})
    if twice:  # which of the two would the rows mean? Refused rather than one of them taken silently
        raise ImportFormatError(f"CSV names the column(s) {', '.join(twice)} more than once (header: {', '.join(header)}).")
    _unknown(h for h in header if h)  # a blank column (a spreadsheet's trailing delimiter) may stay, empty
    reader.fieldnames = header
    rows = []
    try:
        for n, record in enumerate(reader, start=1):
            if None in record:
                raise ImportFormatError(f"Row {n}: more fields than the header has columns.")
            if (record.get("") or "").strip():
                raise ImportFormatError(f"Row {n}: a value under a column with no name; a row holds phrase and verb.")
            phrase, verb = (record.get("phrase") or "").strip(), (record.get("verb") or "").strip()
            rows.append(ImportRow(n, _checked(phrase, n, "phrase"), _checked(verb, n, "verb")))
            if len(rows) > settings.LEARNING_IMPORT_MAX_ROWS:
                raise ImportFormatError(
                    f"The import holds more than {settings.LEARNING_IMPORT_MAX_ROWS} rows, the limit "
                    "(LEARNING_IMPORT_MAX_ROWS): split the file."
                )
    except csv.Error as exc:
        raise ImportFormatError(f"Invalid CSV at line {reader.line_num}: {exc}.") from None
    return rows
