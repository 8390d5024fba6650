"""64-bit SimHash (Charikar) for near-duplicate text detection.

Features are the word unigrams and bigrams of the normalised text, each hashed
with the first 8 bytes of BLAKE2b and weighted by its count. Two texts whose
fingerprints differ in at most a few bits (Hamming distance) are near-identical.
Fingerprints are written as 16 lowercase hex characters.
"""

import hashlib
import re
from collections import Counter

from common.text import normalize_phrase

BITS = 64
_WORD = re.compile(r"[\w$@#%+\-./:]+", re.UNICODE)
_MASK = (1 << BITS) - 1


def tokens(text: str) -> list[str]:
    """Normalised word tokens (punctuation at word edges dropped)."""
    out = []
    for raw in _WORD.findall(normalize_phrase(text)):
        word = raw.strip(".,:;-/")
        if word:
            out.append(word)
    return out


def features(text: str) -> Counter:
    words = tokens(text)
    feats = Counter(words)
    feats.update(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))
    return feats


def _hash64(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")


def simhash(text: str) -> int:
    """The 64-bit fingerprint of ``text`` as an unsigned int (0 for text without words)."""
    weights = [0] * BITS
    for feature, count in features(text).items():
        h = _hash64(feature)
        for bit in range(BITS):
            weights[bit] += count if (h >> bit) & 1 else -count
    value = 0
    for bit, w in enumerate(weights):
        if w > 0:
            value |= 1 << bit
    return value & _MASK


def to_hex(value: int) -> str:
    return f"{value & _MASK:016x}"


def from_hex(text: str) -> int:
    if len(text) != 16:
        raise ValueError("a SimHash is 16 hex characters")
    return int(text, 16)


def simhash_hex(text: str) -> str:
    return to_hex(simhash(text))


def hamming(a: int | str, b: int | str) -> int:
    """Number of differing bits between two fingerprints (ints or hex strings)."""
    if isinstance(a, str):
        a = from_hex(a)
    if isinstance(b, str):
        b = from_hex(b)
    return ((a ^ b) & _MASK).bit_count()
