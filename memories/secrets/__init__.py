"""Secret detection for the memory write-gate, hardened against disguised secrets.

The secret family of the memory write gate (``memories.write_gate``). No Django. Public API:

    find_secrets(text) -> list[Finding]   # kind + span in the ORIGINAL text
    redact(text) -> str                   # every secret span -> "[REDACTED:<kind>]"

How it works (see NOTES.md): the text is turned into several *views*. Every view keeps, for
each of its characters, the span of original characters it came from, so a match in any view
maps back to a span of the original text.

* canonical  NFKC per character, format/zero-width/combining characters dropped, Unicode
             confusables (Cyrillic/Greek/... look-alikes, from the ``confusable_homoglyphs``
             copy of Unicode TR39 confusables.txt) mapped to ASCII, odd spaces, quotes and
             dashes mapped to ASCII.
* collapsed  canonical with the gaps between chunks removed: whitespace, quotes, " + "
             concatenation, spaced dashes / pipes ("A K I A ...", '"AKIA" + "IOSF..."').
* desep      collapsed with in-token separators between alphanumerics removed too
             ("AKIA-IOSF-ODNN-...", "AKIA.IOSF...").
* reversed   canonical and collapsed, reversed ("5Yx3Wv1Ut...7fG5eD3Ba_phg").
* decoded    base64 / hex / %-encoded runs decoded and the result scanned again (recursively,
             depth 2); a hit covers the whole encoded run.

Detectors are detect-secrets' plugin regexes (instantiated once, used through their
``denylist`` patterns, ``JwtTokenDetector.is_formally_valid`` and the high-entropy plugins'
``calculate_shannon_entropy``/``entropy_limit``, with detect-secrets' heuristic filters), plus
the project's own checks where detect-secrets has none (cards with Luhn, connection strings,
passwords/passphrases in prose, credentials given as command-line flags, Anthropic/Google/modern
OpenAI/Stripe test keys, bearer tokens, the secret half of an AWS key pair, ...). Context-dependent
detectors (keywords, entropy, prose, cards, command lines) run on the canonical view only;
prefix-anchored token detectors run on every view, and in the collapsed/reversed views a match
must start and end on chunk boundaries, which keeps glued-together prose from producing false
positives.

Modules: ``views`` (the views), ``rules`` (value rules and patterns), ``detectors``, ``scan``
(``find_secrets``/``redact``). Corpus: tests/data/secrets.txt and tests/data/lookalikes.txt.
"""

from memories.secrets.scan import find_secrets, redact
from memories.secrets.views import SECRET, Finding

__all__ = ["SECRET", "Finding", "find_secrets", "redact"]
