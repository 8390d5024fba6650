"""Text normalisation shared by exact matching, hashing and embedding."""

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,!?;:'\"`()[]{}"


# Printable characters that show nothing: Hangul fillers, the combining grapheme joiner, variation selectors,
# Mongolian free variation selectors, Khmer inherent vowels (dropped), and the blank Braille pattern (a space).
_BLANK = re.compile("[\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5\u180b-\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef\u2800]")


def _blank(match: re.Match) -> str:
    return " " if match.group() == "\u2800" else ""


def visible_text(text: str) -> str:
    """Without the characters nobody sees: format characters (zero-width space and joiners, the soft hyphen, the
    byte-order mark, bidirectional marks) and printable ones that show nothing (``_BLANK``) are dropped, control
    characters read as a space, so "pay\u200bbill" is "paybill" and a text of only such characters is empty."""
    if not text.isprintable():
        out = []
        for c in text:
            category = unicodedata.category(c)
            out.append("" if category == "Cf" else " " if category == "Cc" else c)
        text = "".join(out)
    return _BLANK.sub(_blank, text)


def normalize_phrase(text: str) -> str:
    """Casefolded, NFKC, without invisible characters, single-spaced, without surrounding punctuation."""
    text = unicodedata.normalize("NFKC", visible_text(text or "")).casefold()
    text = _SPACE.sub(" ", text).strip(_EDGE_PUNCT)
    return _SPACE.sub(" ", text).strip()


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
