"""Reading verb catalogue files (YAML), with every error named by file and line.

A file holds a list of verbs, or a mapping with a ``verbs`` list::

    verbs:
      - name: cbu.create            # dotted, lowercase
        domain: cbu                 # optional, defaults to the part before the first dot
        display_name: Create a CBU  # optional
        description: Open a new client business unit.
        phrases: [create a cbu, new cbu, open a client business unit]
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from common.parsers import text_problem
from common.text import normalize_phrase
from learning.importing import ImportFormatError, NoAliasLoader
from learning.models import DOMAIN_RE, VERB_NAME_RE, Verb, VerbPhrase

MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_NODES = 200_000
MAX_PHRASE_LENGTH = VerbPhrase._meta.get_field("text").max_length
NAME_LENGTH = Verb._meta.get_field("name").max_length
TEXT_LENGTHS = {key: Verb._meta.get_field(key).max_length for key in ("domain", "display_name", "description")}
KNOWN_KEYS = {"name", "domain", "display_name", "description", "phrases", "is_active"}


@dataclass
class VerbEntry:
    """A verb as a catalogue file gives it. A field left None is not set by the file: a load keeps what the verb has
    (a retirement or a description edited in the admin); a new verb is active, with no display name or description."""

    name: str
    domain: str
    display_name: str | None = None
    description: str | None = None
    phrases: list[str] = field(default_factory=list)
    is_active: bool | None = None
    origin: str = ""
    lists_phrases: bool = True  # False: the file has no ``phrases`` for it (a load that replaces phrases keeps them)


class CatalogueError(Exception):
    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


def _plain(node, budget: list[int]):
    """A composed YAML node as plain Python (the loader refused aliases and bounded the depth)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise CatalogueError([f"line {node.start_mark.line + 1}: document too large"])
    if isinstance(node, yaml.ScalarNode):
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_plain(n, budget) for n in node.value]
    if isinstance(node, yaml.MappingNode):
        return {str(_plain(k, budget)): (v, _plain(v, budget)) for k, v in node.value}
    raise CatalogueError([f"line {node.start_mark.line + 1}: unsupported YAML node"])


class _CatalogueLoader(NoAliasLoader):
    too_deep = "nested too deeply; a catalogue is a list of verbs"


def _compose(text: str, where: str):
    """The document's root node: no anchors or aliases, bounded depth, every refusal named by file and line."""
    loader = None
    try:
        loader = _CatalogueLoader(text)
        return loader.get_single_node()
    except ImportFormatError as exc:
        raise CatalogueError([f"{where}: {exc}"]) from None
    except RecursionError:
        raise CatalogueError([f"{where}: {_CatalogueLoader.too_deep}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).replace("\n", " ")
        raise CatalogueError([f"{where}{line}: invalid YAML: {problem}"]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _read(path: Path, where: str) -> str:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise CatalogueError([f"{where}: file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"])
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CatalogueError([f"{where}: cannot read the file ({exc.strerror or exc})"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise CatalogueError([f"{where}: file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogueError([f"{where}: not UTF-8 text ({exc.reason})"]) from None


def _text_error(value: str, key: str, limit: int | None) -> str | None:
    """Why the database would refuse this text, or None."""
    if limit is not None and len(value) > limit:
        return f"'{key}' is longer than {limit} characters"
    problem = text_problem(value)
    return f"'{key}' {problem}" if problem else None


def parse_file(path: Path) -> list[VerbEntry]:
    where = str(path)
    root = _compose(_read(path, where), where)
    if root is None:
        return []
    if isinstance(root, yaml.MappingNode):
        mapping = {k.value: v for k, v in root.value if isinstance(k, yaml.ScalarNode)}
        if "verbs" not in mapping:
            raise CatalogueError([f"{where}:{root.start_mark.line + 1}: expected a 'verbs' list"])
        root = mapping["verbs"]
    if not isinstance(root, yaml.SequenceNode):
        raise CatalogueError([f"{where}:{root.start_mark.line + 1}: expected a list of verbs"])

    entries, errors = [], []
    budget = [MAX_NODES]
    for item in root.value:
        line = item.start_mark.line + 1
        at = f"{where}:{line}"
        if not isinstance(item, yaml.MappingNode):
            errors.append(f"{at}: each verb must be a mapping with at least 'name'")
            continue
        data = _plain(item, budget)
        values = {k: v for k, (_, v) in data.items()}
        lines = {k: n.start_mark.line + 1 for k, (n, _) in data.items()}
        unknown = sorted(set(values) - KNOWN_KEYS)
        if unknown:
            errors.append(f"{at}: unknown key(s) {', '.join(unknown)}")
        name = values.get("name")
        if not isinstance(name, str) or not re.fullmatch(VERB_NAME_RE, name):
            errors.append(f"{where}:{lines.get('name', line)}: 'name' must be a dotted lowercase name such as cbu.create")
            continue
        if len(name) > NAME_LENGTH:
            errors.append(f"{where}:{lines['name']}: 'name' is longer than {NAME_LENGTH} characters")
            continue
        entry = VerbEntry(name=name, domain=name.split(".", 1)[0], origin=at)
        for key in ("domain", "display_name", "description"):
            if key in values:
                if not isinstance(values[key], str):
                    errors.append(f"{where}:{lines[key]}: verb {name}: '{key}' must be text")
                elif problem := _text_error(values[key].strip(), key, TEXT_LENGTHS[key]):
                    errors.append(f"{where}:{lines[key]}: verb {name}: {problem}")
                else:
                    setattr(entry, key, values[key].strip())
        if not entry.domain or len(entry.domain) > TEXT_LENGTHS["domain"] or not re.fullmatch(DOMAIN_RE, entry.domain):
            errors.append(f"{where}:{lines.get('domain', line)}: verb {name}: 'domain' must be a lowercase identifier")
        if "is_active" in values:
            flag = str(values["is_active"]).lower()
            if flag not in {"true", "false", "yes", "no"}:
                errors.append(f"{where}:{lines['is_active']}: verb {name}: 'is_active' must be true or false")
            entry.is_active = flag in {"true", "yes"}
        entry.lists_phrases = "phrases" in values
        phrases = values.get("phrases", [])
        if not isinstance(phrases, list):
            errors.append(f"{where}:{lines.get('phrases', line)}: verb {name}: 'phrases' must be a list of text")
            phrases = []
        for i, phrase in enumerate(phrases):
            at_phrase = f"{where}:{lines['phrases']}: verb {name}: phrase {i + 1}"
            if not isinstance(phrase, str) or not normalize_phrase(phrase):
                errors.append(f"{at_phrase} is empty or not text")
            elif len(phrase) > MAX_PHRASE_LENGTH or len(normalize_phrase(phrase)) > MAX_PHRASE_LENGTH:
                errors.append(f"{at_phrase} is longer than {MAX_PHRASE_LENGTH} characters")
            elif problem := text_problem(phrase):
                errors.append(f"{at_phrase} {problem}")
            else:
                entry.phrases.append(phrase.strip())
        entries.append(entry)
    if errors:
        raise CatalogueError(errors)
    return entries


def parse_path(path: Path) -> list[VerbEntry]:
    """All verbs of one file or of every *.yaml / *.yml file under a directory."""
    try:
        if not path.exists():
            raise CatalogueError([f"{path}: no such file or directory"])
        files = sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml"}) if path.is_dir() else [path]
    except OSError as exc:
        raise CatalogueError([f"{path}: cannot read ({exc.strerror or exc})"]) from None
    if not files:
        raise CatalogueError([f"{path}: no .yaml or .yml files"])
    entries, errors, seen = [], [], {}
    for f in files:
        try:
            for entry in parse_file(f):
                if entry.name in seen:
                    errors.append(f"{entry.origin}: verb {entry.name} is already defined at {seen[entry.name]}")
                else:
                    seen[entry.name] = entry.origin
                    entries.append(entry)
        except CatalogueError as exc:
            errors.extend(exc.errors)
    if not errors and not entries:
        errors.append(f"{path}: holds no verbs")
    if errors:
        raise CatalogueError(errors)
    return entries
