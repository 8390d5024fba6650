"""Text normalisation shared by exact matching, hashing and embedding."""

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,!?;:'\"`()[]{}"


BRAILLE_BLANK = unicodedata.lookup("BRAILLE PATTERN BLANK")  # read as a space
# Printable characters that show nothing, dropped (code points in decimal): the Hangul fillers (choseong,
# jungseong, the filler and its halfwidth form), the combining grapheme joiner, the two Khmer inherent vowels,
# the Mongolian free variation selectors with the vowel separator, the variation selectors and their supplement.
_SHOW_NOTHING = [4447, 4448, 12644, 65440, 847, 6068, 6069, *range(6155, 6160), *range(65024, 65040)]
_SHOW_NOTHING += range(917760, 918000)
_BLANK = re.compile("[" + re.escape("".join(map(chr, [*_SHOW_NOTHING, ord(BRAILLE_BLANK)]))) + "]")


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
