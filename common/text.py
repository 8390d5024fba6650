"""Text normalisation shared by exact matching, hashing and embedding."""

import hashlib
import re
import sys
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,!?;:'\"`()[]{}"


BRAILLE_BLANK = unicodedata.lookup("BRAILLE PATTERN BLANK")  # read as a space
# Printable characters that show nothing, dropped: the Hangul fillers, the combining grapheme joiner, the two Khmer
# inherent vowels, the Mongolian free variation selectors with the vowel separator (one run), and the variation
# selectors and their supplement (two runs, from the first to the last of each).
_SHOW_NOTHING_RUNS = [
    ("MONGOLIAN FREE VARIATION SELECTOR ONE", "MONGOLIAN FREE VARIATION SELECTOR FOUR"),
    *((f"VARIATION SELECTOR-{first}", f"VARIATION SELECTOR-{last}") for first, last in ((1, 16), (17, 256))),
]
_SHOW_NOTHING = (
    "\N{HANGUL CHOSEONG FILLER}\N{HANGUL JUNGSEONG FILLER}\N{HANGUL FILLER}\N{HALFWIDTH HANGUL FILLER}"
    "\N{COMBINING GRAPHEME JOINER}\N{KHMER VOWEL INHERENT AQ}\N{KHMER VOWEL INHERENT AA}"
) + "".join(
    map(chr, (c for a, b in _SHOW_NOTHING_RUNS for c in range(ord(unicodedata.lookup(a)), ord(unicodedata.lookup(b)) + 1)))
)
_BLANK = re.compile("[" + re.escape(_SHOW_NOTHING + BRAILLE_BLANK) + "]")


def _blank(match: re.Match) -> str:
    return " " if match.group() == BRAILLE_BLANK else ""


def visible_text(text: str) -> str:
    """Without the characters nobody sees: format characters (zero-width space and joiners, the soft hyphen, the
    byte-order mark, bidirectional marks) and printable ones that show nothing (``_BLANK``) are dropped, control
    characters read as a space, so "pay", a zero-width space and "bill" read "paybill", and a text of only such
    characters is empty."""
    if not text.isprintable():
        out = []
        for c in text:
            category = unicodedata.category(c)
            out.append("" if category == "Cf" else " " if category == "Cc" else c)
        text = "".join(out)
    return _BLANK.sub(_blank, text)


def _span(first: str, after: str) -> list[str]:
    """The characters from ``first`` up to, not including, ``after``."""
    return [chr(c) for c in range(ord(first), ord(after))]


# Typographic quotes, apostrophes and dashes read as the plain ones a keyboard types, so a phone's "I’m" (smart
# punctuation) matches a desktop's "I'm".
_SINGLE_QUOTES = [
    *_span("\N{LEFT SINGLE QUOTATION MARK}", "\N{LEFT DOUBLE QUOTATION MARK}"),  # left, right, low, reversed
    "\N{PRIME}",
    "\N{REVERSED PRIME}",
    "\N{MODIFIER LETTER APOSTROPHE}",
    "\N{GRAVE ACCENT}",  # typed as an apostrophe
    "\N{ACUTE ACCENT}",
]
_DOUBLE_QUOTES = [
    *_span("\N{LEFT DOUBLE QUOTATION MARK}", "\N{DAGGER}"),  # left, right, low, reversed
    "\N{DOUBLE PRIME}",
    "\N{REVERSED DOUBLE PRIME}",
    "\N{LEFT-POINTING DOUBLE ANGLE QUOTATION MARK}",
    "\N{RIGHT-POINTING DOUBLE ANGLE QUOTATION MARK}",
]
_DASHES = [*_span("\N{HYPHEN}", "\N{DOUBLE VERTICAL LINE}"), "\N{MINUS SIGN}"]  # hyphens, dashes, the bar
_PLAIN_PUNCTUATION = str.maketrans(
    {**dict.fromkeys(_SINGLE_QUOTES, "'"), **dict.fromkeys(_DOUBLE_QUOTES, '"'), **dict.fromkeys(_DASHES, "-")}
)


def rewritten_pattern() -> str:
    """A regular expression (Python's and PostgreSQL's) matching any character that normalisation drops or
    rewrites besides NFKC and casefolding: control and format characters, the ones that show nothing, typographic
    quotes and dashes. A text normalised before one of them was handled needs normalising again only if it holds
    one of them."""
    codes = {c for c in range(1, sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cc", "Cf")}
    codes = sorted(codes | {*map(ord, _SHOW_NOTHING), ord(BRAILLE_BLANK), *_PLAIN_PUNCTUATION})
    ranges, start = [], codes[0]
    for previous, code in zip(codes, [*codes[1:], None], strict=True):
        if code != previous + 1:
            ranges.append(chr(start) if start == previous else f"{chr(start)}-{chr(previous)}")
            start = code
    return "[" + "".join(ranges) + "]"


def plain_punctuation(text: str) -> str:
    """``text`` with typographic quotes, apostrophes and dashes as their plain keyboard forms."""
    return text.translate(_PLAIN_PUNCTUATION)


def normalize_phrase(text: str) -> str:
    """Casefolded, NFKC, without invisible characters, with plain quotes and dashes, single-spaced, without
    surrounding punctuation."""
    text = unicodedata.normalize("NFKC", plain_punctuation(visible_text(text or ""))).casefold()
    text = _SPACE.sub(" ", text).strip(_EDGE_PUNCT)
    return _SPACE.sub(" ", text).strip()


def label_normalize(text: str) -> str:
    """A label people type (a mistake category): NFKC, casefolded, without invisible characters, single-spaced, so
    a category typed in capitals, in lower case or in fullwidth letters is one label."""
    return " ".join(unicodedata.normalize("NFKC", visible_text(text or "")).casefold().split())


def text_hash(text: str) -> str:
    """The sha256 hex digest of the text a vector was computed from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def terminal_safe(text: str) -> str:
    """``text`` for a terminal: a new line reads as a space and every other character that is not printable (an
    escape sequence's ESC, a bell, a bidirectional override) is shown escaped, never sent to the operator's terminal."""
    text = text.replace("\r\n", " ").replace("\n", " ")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
