"""Text normalisation shared by exact matching, hashing and embedding."""

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,!?;:'\"`()[]{}"


def normalize_phrase(text: str) -> str:
    """Casefolded, NFKC, single-spaced, without surrounding punctuation."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    text = _SPACE.sub(" ", text).strip(_EDGE_PUNCT)
    return _SPACE.sub(" ", text).strip()


def text_hash(text: str) -> str:
    """SHA-256 of the text a vector was computed from (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
