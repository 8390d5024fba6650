"""Paraphrase variants of a phrase, driven by the word lists in ``data/variant_rules.yaml``.

Rules: drop leading politeness and filler words (articles, quantifiers,
possessives, fillers); swap the leading action word within its synonym group;
flip the number of the last word (plural <-> singular). Rules compose, so
"list all cbus" yields "list cbus", "show cbus", "list all cbu", ...

A flipped word must be English as people write it: wordfreq's English frequencies (word lists that ship in
the package, no download) must know it, and it may be at most ``number_flip_max_rarity`` Zipf points rarer
than the word it replaces. That keeps "cards" and "identities", and drops "arriveds" (a verb, no such
word), "moneys" and "cashes" (mass nouns: their plurals are rare).
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from common.text import normalize_phrase

RULES_PATH = Path(__file__).resolve().parent / "data" / "variant_rules.yaml"
_VOWELS = set("aeiou")


@dataclass(frozen=True)
class Rules:
    verb_swaps: tuple[tuple[str, ...], ...]
    drop_words: frozenset[str]
    drop_prefixes: tuple[str, ...]
    singular_suffixes: tuple[tuple[str, str], ...]
    plural_suffixes: tuple[tuple[str, str], ...]
    singular_endings: tuple[str, ...]
    invariant: frozenset[str]
    irregular: dict
    singular_articles: frozenset[str] = frozenset()
    number_flip_max_rarity: float = 1.0


def rules_parse(data: dict) -> Rules:
    """Rules from the YAML mapping (validated: lists of strings)."""
    drop = data.get("drop_words") or {}
    words = [w for group in (drop.values() if isinstance(drop, dict) else [drop]) for w in group]
    irregular = {str(k).lower(): str(v).lower() for k, v in (data.get("irregular") or {}).items()}
    return Rules(
        verb_swaps=tuple(tuple(normalize_phrase(w) for w in group) for group in data.get("verb_swaps") or []),
        drop_words=frozenset(normalize_phrase(w) for w in words),
        drop_prefixes=tuple(sorted((normalize_phrase(p) for p in data.get("drop_prefixes") or []), key=len, reverse=True)),
        singular_suffixes=tuple((str(a), str(b)) for a, b in data.get("singular_suffixes") or []),
        plural_suffixes=tuple((str(a), str(b)) for a, b in data.get("plural_suffixes") or []),
        singular_endings=tuple(data.get("singular_endings") or []),
        invariant=frozenset(str(w).lower() for w in data.get("invariant") or []),
        irregular=irregular,
        singular_articles=frozenset(str(w).lower() for w in data.get("singular_articles") or []),
        number_flip_max_rarity=float(data.get("number_flip_max_rarity", 1.0)),
    )


@functools.cache
def rules_load(path: str = str(RULES_PATH)) -> Rules:
    with open(path, encoding="utf-8") as fh:
        return rules_parse(yaml.safe_load(fh) or {})


def drop_fillers(phrase: str, rules: Rules) -> str:
    """Without leading politeness and without filler words (keeps at least one word)."""
    text = phrase
    for prefix in rules.drop_prefixes:
        if text.startswith(prefix + " "):
            text = text[len(prefix) + 1 :]
            break
    kept = [w for w in text.split() if w not in rules.drop_words]
    return " ".join(kept) if kept else phrase


def swap_verbs(phrase: str, rules: Rules) -> list[str]:
    """The phrase with its leading action word replaced by each synonym of its group."""
    out = []
    for group in rules.verb_swaps:
        for word in sorted(group, key=len, reverse=True):
            if phrase == word or phrase.startswith(word + " "):
                rest = phrase[len(word) :]
                out.extend(other + rest for other in group if other != word)
                return out
    return out


def _is_consonant_y(word: str) -> bool:
    return len(word) >= 2 and word.endswith("y") and word[-2] not in _VOWELS


@functools.lru_cache(maxsize=50_000)
def word_zipf(word: str) -> float:
    """How common ``word`` is in written English (Zipf scale, 0: unknown)."""
    from wordfreq import zipf_frequency  # here: importing it takes about a second, and most processes never ask

    return zipf_frequency(word, "en")


def plausible_flip(word: str, flipped: str, rules: Rules) -> bool:
    """A known English word, not much rarer than the word it replaces."""
    rarity = word_zipf(flipped)
    return rarity > 0 and rarity >= word_zipf(word) - rules.number_flip_max_rarity


def flip_number(word: str, rules: Rules) -> str | None:
    """Plural <-> singular of one word, or None when the rules leave it alone or the result is not good English."""
    flipped = _flip_number(word, rules)
    return flipped if flipped and plausible_flip(word, flipped, rules) else None


def _flip_number(word: str, rules: Rules) -> str | None:
    if not re.fullmatch(r"[a-z]{3,}", word) or word in rules.invariant:
        return None
    reverse = {v: k for k, v in rules.irregular.items()}
    if word in rules.irregular:
        return rules.irregular[word]
    if word in reverse:
        return reverse[word]
    plural = word.endswith("s") and not word.endswith(rules.singular_endings)
    if plural:
        for suffix, repl in rules.singular_suffixes:
            if word.endswith(suffix) and len(word) - len(suffix) >= 2:
                return word[: len(word) - len(suffix)] + repl
        return None
    for suffix, repl in rules.plural_suffixes:
        if suffix == "consonant+y":
            if _is_consonant_y(word):
                return word[:-1] + repl
        elif word.endswith(suffix):
            return word[: len(word) - len(suffix)] + repl
    return None


def flip_last_number(phrase: str, rules: Rules) -> str | None:
    words = phrase.split()
    if len(words) < 2:
        return None
    flipped = flip_number(words[-1], rules)
    if not flipped:
        return None
    head = words[:-1]
    if len(flipped) > len(words[-1]) and len(head) > 1 and head[-1] in rules.singular_articles:
        head = head[:-1]  # "delete a cbu" -> "delete cbus", not "delete a cbus"
    return " ".join(head + [flipped])


def phrase_variants(phrase: str, *, limit: int = 12, rules: Rules | None = None) -> list[str]:
    """Distinct normalized variants of ``phrase`` (never the phrase itself), most conservative first."""
    rules = rules or rules_load()
    original = normalize_phrase(phrase)
    if not original:
        return []
    dropped = drop_fillers(original, rules)
    bases = [original] + ([dropped] if dropped != original else [])
    ordered: list[str] = []
    # 1. fewer words, 2. other number, 3. synonyms of the action, 4. synonyms in the other number.
    ordered.extend(bases[1:])
    ordered.extend(f for f in (flip_last_number(b, rules) for b in bases) if f)
    swapped = [s for b in reversed(bases) for s in swap_verbs(b, rules)]
    ordered.extend(swapped)
    ordered.extend(f for f in (flip_last_number(s, rules) for s in swapped) if f)
    seen = {original}
    out = []
    for v in ordered:
        if v and v not in seen:
            seen.add(v)
            out.append(v)
    return out[:limit]
