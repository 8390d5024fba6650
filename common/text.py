"""Text normalisation shared by exact matching, hashing and embedding."""

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,!?;:'\"`()[]{}"


def visible_text(text: str) -> str:
    """Without the characters nobody sees: format characters (zero-width space and joiners, the soft hyphen, the
    byte-order mark, bidirectional marks) are dropped and control characters read as a space, so "pay\u200bbill" is
    "paybill" and a text of only such characters is empty."""
    if text.isprintable():  # the common case: nothing to drop
        return text
    out = []
    for c in text:
        category = unicodedata.category(c)
        out.append("" if category == "Cf" else " " if category == "Cc" else c)
    return "".join(out)


def normalize_phrase(text: str) -> str:
    """Casefolded, NFKC, without invisible characters, single-spaced, without surrounding punctuation."""
    text = unicodedata.normalize("NFKC", visible_text(text or "")).casefold()
    text = _SPACE.sub(" ", text).strip(_EDGE_PUNCT)
    return _SPACE.sub(" ", text).strip()


def text_hash(text: str) -> str:
    """SHA-256 of the text a vector was computed from (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
