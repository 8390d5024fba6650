"""Secret scanning, part 1: the views of a text (canonical, collapsed, de-separated, reversed, percent-decoded),
each mapping its characters back to spans of the original text. See memories/secrets/__init__.py."""

import re
import unicodedata
from dataclasses import dataclass, field

from confusable_homoglyphs.confusables import confusables_data

SECRET = "secret"


@dataclass(frozen=True)
class Finding:
    """Same shape as ``write_gate.Finding`` (family, kind, start, end); ``via`` names the view."""

    family: str
    kind: str
    start: int = -1
    end: int = -1
    via: str = field(default="canonical", compare=False)


# =============================================================================================
# Views: a transformed text plus, per character, the original span it came from.
# =============================================================================================


class View:
    __slots__ = ("name", "text", "starts", "ends", "gap_before")

    def __init__(self, name: str, text: str, starts: list[int], ends: list[int], gap_before: list[bool] | None = None):
        self.name, self.text, self.starts, self.ends = name, text, starts, ends
        # gap_before[i]: characters were removed between text[i-1] and text[i] (a chunk boundary)
        self.gap_before = gap_before

    def orig_span(self, i: int, j: int) -> tuple[int, int]:
        """The smallest original region holding view characters ``text[i:j]``."""
        if j <= i:
            j = i + 1
        i, j = max(0, i), min(len(self.text), j)
        return min(self.starts[i:j]), max(self.ends[i:j])

    def is_boundary(self, i: int) -> bool:
        """A chunk boundary lies before position ``i`` (start/end of text, a removed gap or a non-word char)."""
        t = self.text
        if i <= 0 or i >= len(t):
            return True
        if self.gap_before is not None and self.gap_before[i]:
            return True
        return not (_is_word(t[i - 1]) and _is_word(t[i]))

    def crosses_gap(self, i: int, j: int) -> bool:
        g = self.gap_before
        return g is not None and any(g[i + 1 : j])

    def __repr__(self) -> str:  # pragma: no cover
        return f"View({self.name!r}, {self.text!r})"


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def identity(text: str) -> View:
    n = len(text)
    return View("canonical", text, list(range(n)), list(range(1, n + 1)))


# --- canonical: NFKC, format characters, confusables -------------------------------------------

_PUNCT_TO_ASCII = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u00b4\u02bc\u2035", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\u2036", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\u2043\u30fc", "-"),
    "\u2044": "/",
    "\u2215": "/",
    "\u29f8": "/",
    "\u00b7": "·",
}


def _build_confusable_map() -> dict[str, str]:
    """Non-ASCII character -> the ASCII character it is visually confusable with (Unicode TR39).

    Uses the confusables data shipped by ``confusable_homoglyphs``. Where a character has several
    ASCII look-alikes, prefer a letter of the same case, then any letter, then a digit, then
    punctuation (so Cyrillic "О" becomes "O", not "0")."""
    pieces: dict[str, str] = {}
    for ch, homoglyphs in confusables_data.items():
        if len(ch) != 1 or ch.isascii():
            continue
        cands = [h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isprintable() and h["c"] != " "]
        if not cands:
            continue

        def rank(c: str, ch: str = ch) -> tuple[int, str]:
            if c.isalpha() and (c.isupper() == ch.isupper() or not ch.isalpha()):
                return (0, c)
            if c.isalpha():
                return (1, c)
            if c.isdigit():
                return (2, c)
            return (3, c)

        best = min(cands, key=rank)
        # confusables.txt maps to a skeleton prototype ("l" for I/l/1 look-alikes): keep the case
        if ch.isupper() and best == "l":
            best = "I"
        elif ch.isupper() and best.islower():
            best = best.upper()
        pieces[ch] = best
    pieces.update(_PUNCT_TO_ASCII)
    return pieces


_CONFUSABLE: dict[str, str] = _build_confusable_map()
_DROP_CATEGORIES = {"Cf", "Mn", "Me", "Cc", "Cs", "Co"}


def canonical(text: str) -> View:
    """NFKC + drop zero-width/format/combining characters + confusables -> ASCII.

    Each output character maps back to the single original character it came from."""
    if text.isascii():
        return identity(text)
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for k, c in enumerate(text):
        if c.isascii():
            pieces.append(c)
            starts.append(k)
            ends.append(k + 1)
            continue
        if unicodedata.category(c) in _DROP_CATEGORIES:
            continue  # zero-width space/joiners, BOM, soft hyphen, bidi marks, combining marks
        for ch in unicodedata.normalize("NFKC", c):
            if not ch.isascii():
                cat = unicodedata.category(ch)
                if cat in _DROP_CATEGORIES:
                    continue
                if cat.startswith("Z") or ch.isspace():
                    ch = " "
                else:
                    ch = _CONFUSABLE.get(ch, ch)
            pieces.append(ch)
            starts.append(k)
            ends.append(k + 1)
    return View("canonical", "".join(pieces), starts, ends)


# --- collapsed / desep / reversed / percent-decoded ---------------------------------------------

# Gaps between chunks of a disguised token: whitespace and quotes, string concatenation with "+",
# a spaced dash / pipe / middle dot. Only removed *between* token characters.
_GAP = re.compile(r"""(?<=[A-Za-z0-9_/+=\-.])(?:[\s"'`]*\+[\s"'`]*|\s+-\s+|\s*[|·]\s*|[\s"'`]+)(?=[A-Za-z0-9_/+\-])""")
# In-token separators between alphanumerics: "AKIA-IOSF-ODNN", "AKIA.IOSF", "AKIA_IOSF", "AKIA:IOSF"
_SEP = re.compile(r"(?<=[A-Za-z0-9])[-._:\\/]+(?=[A-Za-z0-9])")


def _remove(view: View, pattern: re.Pattern, name: str) -> View:
    text = view.text
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    gap: list[bool] = list(view.gap_before) if view.gap_before is not None else [False] * len(text)
    new_gap: list[bool] = []
    last = 0
    pending = False
    for m in pattern.finditer(text):
        a = m.start()
        if a > last:
            pieces.append(text[last:a])
            starts.extend(view.starts[last:a])
            ends.extend(view.ends[last:a])
            seg = gap[last:a]
            if pending:
                seg[0] = True
            new_gap.extend(seg)
            pending = False
        pending = True
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
        starts.extend(view.starts[last:])
        ends.extend(view.ends[last:])
        seg = gap[last:]
        if pending:
            seg[0] = True
        new_gap.extend(seg)
    return View(name, "".join(pieces), starts, ends, new_gap)


def collapsed(view: View) -> View:
    """Remove whitespace / quotes / " + " / spaced dashes between token chunks."""
    return _remove(view, _GAP, "collapsed")


def desep(view: View) -> View:
    """Also remove separators between alphanumerics (dashes, dots, underscores, colons, slashes)."""
    return _remove(view, _SEP, "desep")


def reversed_view(view: View) -> View:
    n = len(view.text)
    gap = None
    if view.gap_before is not None:
        # a gap before original position i is a gap before reversed position n - i
        gap = [False] * n
        for i in range(1, n):
            if view.gap_before[i]:
                gap[n - i] = True
    return View("reversed-" + view.name, view.text[::-1], view.starts[::-1], view.ends[::-1], gap)


_PCT = re.compile(r"%[0-9A-Fa-f]{2}")


def percent_decoded(view: View) -> View | None:
    """%41%4B%49%41... -> AKIA... (only when the text holds percent escapes)."""
    if not _PCT.search(view.text):
        return None
    text = view.text
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i = 0
    while i < len(text):
        m = _PCT.match(text, i)
        if m:
            b = int(text[i + 1 : i + 3], 16)
            if 32 <= b < 127:
                pieces.append(chr(b))
                starts.append(view.starts[i])
                ends.append(view.ends[i + 2])
                i += 3
                continue
        pieces.append(text[i])
        starts.append(view.starts[i])
        ends.append(view.ends[i])
        i += 1
    return View("percent", "".join(pieces), starts, ends)


def views(text: str) -> list[View]:
    """All views of ``text`` the structured detectors run on (canonical first)."""
    canon = canonical(text)
    col = collapsed(canon)
    pieces = [canon, col, desep(col), reversed_view(canon), reversed_view(col)]
    pct = percent_decoded(canon)
    if pct is not None:
        pieces.append(pct)
    return pieces
