"""The memory write-gate: decides whether a lesson may be stored.

``check(text)`` answers a :class:`GateResult`. Checks run in this order and the
first failing family names the reason:

1. ``secret``: API keys and tokens of common shapes (AWS, GitHub, OpenAI,
   Anthropic, Slack, Stripe, Google, JWT, bearer tokens), private key blocks,
   card numbers that pass the Luhn check, connection strings with credentials,
   passwords (and other secrets) in ``key=value`` form or in prose.
2. ``unstable``: facts that will not stay true: relative dates ("today",
   "right now", "next week", "3 days ago"), prices, amounts of money and balances.
3. ``too_short`` / ``too_specific``: too few words to be reusable, or mostly
   one-off identifiers (UUIDs, e-mail addresses, IP addresses, long numbers).

``redact(text)`` replaces every secret span with ``[REDACTED:<kind>]``; the
quarantine keeps only that redacted preview, never the secret.
Pure functions, no Django models; thresholds come from settings when Django is
configured and fall back to the defaults here.
"""

import math
import re
from dataclasses import dataclass, field

SECRET = "secret"
UNSTABLE = "unstable"
TOO_SHORT = "too_short"
TOO_SPECIFIC = "too_specific"

DEFAULT_MIN_CHARS = 20
DEFAULT_MIN_WORDS = 4
DEFAULT_MAX_SPECIFIC_RATIO = 0.25


@dataclass(frozen=True)
class Finding:
    family: str  # secret | unstable | too_short | too_specific
    kind: str  # e.g. aws_access_key, card_number, relative_date
    start: int = -1
    end: int = -1


@dataclass(frozen=True)
class GateResult:
    allowed: bool
    reason: str = ""  # the family of the first finding, "" when allowed
    message: str = ""
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def kinds(self) -> list[str]:
        return sorted({f.kind for f in self.findings})


# --- Secrets ---

_PLACEHOLDER = re.compile(
    r"^(?:<[^>]*>|\$\{[^}]*\}|\$[A-Z_][A-Z0-9_]*|%\(?[\w]+\)?s?|\{\{[^}]*\}\}|\*+|x{3,}|\.{3,}|…|"
    r"none|null|nil|true|false|empty|redacted|changeme|placeholder|your[_-]?\w*|example\w*|"
    r"os\.environ.*|env\(.*|getenv\(.*|process\.env.*|settings\.\w+|config\.\w+|secrets?\.\w+|\[redacted[^\]]*\])$",
    re.IGNORECASE,
)

# Words that follow "password is ..." in clean lessons and are not themselves a password.
_PROSE_NOT_A_SECRET = set(
    """
    a an the is are be been being not no never now set reset changed stored hashed salted encrypted required
    optional mandatory incorrect correct wrong invalid valid expired expiring weak strong case-sensitive
    case-insensitive sensitive too at least longer shorter missing empty blank rotated managed kept saved sent
    checked validated compared generated randomly random only also still never always usually typically
    different same unique secret private hidden masked shown displayed visible long short minimum maximum
    in on of for to from with by via after before when if that which what this it its your their our my his her
    """.split()
)

_SECRET_PATTERNS: list[tuple[str, re.Pattern]] = [
    (
        "private_key_block",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|$)"
        ),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})\b")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    ("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}")),
    ("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}")),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer_token", re.compile(r"(?i)\b(?:bearer|token)\s+[A-Za-z0-9._~+/\-]{20,}=*")),
    ("basic_auth_header", re.compile(r"(?i)\bauthorization:\s*basic\s+[A-Za-z0-9+/]{12,}=*")),
    # scheme://user:password@host (the password part must be non-empty)
    ("credentialed_url", re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:[^\s@/]+@[^\s/]+", re.IGNORECASE)),
    # ADO/JDBC style: Password=...; / AccountKey=...; / SharedAccessKey=...
    (
        "connection_string_secret",
        re.compile(r"(?i)\b(?:password|pwd|accountkey|sharedaccesskey|sharedaccesssignature)\s*=\s*[^;\s\"']{3,}"),
    ),
]

_KV_NAMES = r"[\w.\-]*?(?:password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|auth[_\-]?token|access[_\-]?token|refresh[_\-]?token|client[_\-]?secret|token|credentials?)[\w.\-]*"
_KEY_VALUE = re.compile(rf"(?i)(?<![\w])(?P<name>{_KV_NAMES})[\"']?\s*(?::=|=>|=|:)\s*(?P<q>[\"']?)(?P<value>[^\s\"',;]+)(?P=q)")
_PROSE_PASSWORD = re.compile(
    r"(?i)\b(?P<name>password|passphrase|passcode|passwd|pin|pin code|secret key|api key|access key|token)"
    r"(?:\s+(?:for|to|of|on)(?:\s+[\w.@\-]+){1,3}?)?\s+(?:is now|is set to|was set to|was changed to|is still|is|was|=|are|:|reads|became)\s+"
    r"(?P<q>[\"'`]?)(?P<value>[^\s\"'`]+)(?P=q)"
)
_CARD = re.compile(r"(?<![\d\-])(?:\d[ \-]?){12,18}\d(?![\d\-])")
_SECRET_WORD_NAMES = re.compile(r"(?i)password|passwd|passphrase|pwd|pin|passcode")


def luhn_valid(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = int(ch)
        if i % 2 == parity:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _is_placeholder(value: str) -> bool:
    value = value.strip().rstrip(".")
    return bool(_PLACEHOLDER.match(value)) or value.lower() in {"", "...", "string", "str", "int", "value"}


def _kv_is_secret(name: str, value: str) -> bool:
    value = value.strip().rstrip(".)")
    if _is_placeholder(value) or value.lower() in _PROSE_NOT_A_SECRET:
        return False
    if re.match(r"(?i)^[\w.]+\(", value) or value.startswith(("$", "{", "[", "(")):
        return False  # a function call, variable or structure, not a literal
    if _SECRET_WORD_NAMES.search(name):
        return len(value) >= 4
    # token / key / secret names: a literal that looks random
    if len(value) < 8 or value.isdigit():
        return False
    if re.fullmatch(r"[a-z_]+", value):  # an identifier such as token=refresh_token
        return False
    return _entropy(value) >= 2.5


def secret_findings(text: str) -> list[Finding]:
    found: list[Finding] = []
    for kind, pattern in _SECRET_PATTERNS:
        for m in pattern.finditer(text):
            if kind == "connection_string_secret" and _is_placeholder(m.group(0).split("=", 1)[1]):
                continue
            if kind == "credentialed_url":
                password = m.group(0).split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
                if _is_placeholder(password):
                    continue
            found.append(Finding(SECRET, kind, m.start(), m.end()))
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits) and len(set(digits)) > 1:
            found.append(Finding(SECRET, "card_number", m.start(), m.end()))
    for m in _KEY_VALUE.finditer(text):
        if _kv_is_secret(m.group("name"), m.group("value")):
            found.append(Finding(SECRET, "credential_assignment", m.start("value"), m.end("value")))
    for m in _PROSE_PASSWORD.finditer(text):
        value = m.group("value").rstrip(".,;:!?)")
        quoted = bool(m.group("q"))
        if _is_placeholder(value) or (value.lower() in _PROSE_NOT_A_SECRET and not quoted):
            continue
        if m.group("name").lower() in ("token", "api key", "access key", "secret key") and not _kv_is_secret("token", value):
            continue
        found.append(Finding(SECRET, "password_in_prose", m.start("value"), m.start("value") + len(value)))
    return _merge_spans(found)


def _merge_spans(findings: list[Finding]) -> list[Finding]:
    """Drop findings fully inside another (keep the longest span), sorted by start."""
    findings = sorted(findings, key=lambda f: (f.start, -(f.end - f.start)))
    out: list[Finding] = []
    for f in findings:
        if out and f.start >= out[-1].start and f.end <= out[-1].end:
            continue
        out.append(f)
    return out


def redact(text: str) -> str:
    """The text with each secret span replaced by ``[REDACTED:<kind>]``."""
    findings = secret_findings(text)
    pieces, last = [], 0
    for f in findings:
        if f.start < last:  # overlapping spans: extend the previous redaction
            last = max(last, f.end)
            continue
        pieces.append(text[last : f.start])
        pieces.append(f"[REDACTED:{f.kind}]")
        last = f.end
    pieces.append(text[last:])
    return "".join(pieces)


# --- Unstable facts ---

_CODE = re.compile(r"```[\s\S]*?```|`[^`\n]*`")
_UNSTABLE_PATTERNS: list[tuple[str, re.Pattern]] = [
    (
        "relative_date",
        re.compile(
            r"(?i)(?<![\w.])(?:today|tonight|yesterday|tomorrow|right now|as of now|as of today|at the moment|"
            r"this (?:morning|afternoon|evening|week|weekend|month|quarter|year)|"
            r"(?:last|next|past|coming) (?:night|week|weekend|month|quarter|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
            r"\d+ (?:minutes?|hours?|days?|weeks?|months?|years?) ago|in (?:\d+|a few|two|three) (?:minutes|hours|days|weeks|months)|"
            r"earlier today|later today|just now|currently at|these days)(?![\w(])"
        ),
    ),
    (
        "price",
        re.compile(r"(?:[€£¥₹]\s?\d[\d,]*(?:\.\d+)?|\$\s?\d{1,3}(?:,\d{3})+(?:\.\d+)?|\$\s?\d+\.\d{2}\b|\$\s?\d{2,}(?![\w]))"),
    ),
    ("price", re.compile(r"(?i)\b\d[\d,]*(?:\.\d+)?\s?(?:usd|eur|gbp|jpy|chf|dollars?|euros?|pounds sterling|bucks|cents)\b")),
    (
        "price",
        re.compile(
            r"(?i)\b(?:price|costs?|priced at|fee)\s+(?:is|was|of|are|at|now|currently)?\s*(?:about|around|only)?\s*[$€£¥]?\d"
        ),
    ),
    (
        "balance",
        re.compile(r"(?i)\b(?:balance|available funds|account total)\b[^.\n]{0,30}?(?:is|of|was|shows|at|:)\s*[$€£¥]?-?\d"),
    ),
]


def unstable_findings(text: str) -> list[Finding]:
    prose = _CODE.sub(lambda m: " " * len(m.group(0)), text)  # code never counts as a relative date or price
    out = []
    for kind, pattern in _UNSTABLE_PATTERNS:
        for m in pattern.finditer(prose):
            out.append(Finding(UNSTABLE, kind, m.start(), m.end()))
    return out


# --- Too short / too specific ---

_WORDS = re.compile(r"[^\s]+")
_SPECIFIC = [
    ("uuid", re.compile(r"(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    ("email", re.compile(r"^[\w.+\-]+@[\w\-]+\.[\w.\-]+$")),
    ("ip_address", re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?$")),
    ("long_number", re.compile(r"^#?\d[\d\-]{4,}$")),
    ("hex_id", re.compile(r"(?i)^(?=.*\d)[0-9a-f]{12,}$")),
    ("ticket_id", re.compile(r"^[A-Z][A-Z0-9]{1,9}-\d{2,}$")),
]


def _word_tokens(text: str) -> list[str]:
    return [w.strip(".,;:!?()[]{}\"'") for w in _WORDS.findall(text) if w.strip(".,;:!?()[]{}\"'")]


def size_findings(text: str, *, min_chars: int, min_words: int, max_specific_ratio: float) -> list[Finding]:
    words = _word_tokens(text)
    if len(text.strip()) < min_chars or len(words) < min_words:
        return [Finding(TOO_SHORT, "too_short")]
    specific = [kind for w in words for kind, p in _SPECIFIC if p.match(w)]
    if specific and len(specific) / len(words) > max_specific_ratio:
        return [Finding(TOO_SPECIFIC, specific[0])]
    return []


# --- The gate ---

_MESSAGES = {
    SECRET: "The lesson contains a secret ({kinds}); it was quarantined with the secret redacted.",
    UNSTABLE: "The lesson states a fact that will not stay true ({kinds}).",
    TOO_SHORT: "The lesson is too short to be reusable.",
    TOO_SPECIFIC: "The lesson is mostly one-off identifiers ({kinds}) and too specific to reuse.",
}


def _setting(name: str, default):
    try:
        from django.conf import settings

        return getattr(settings, name, default)
    except Exception:  # Django not configured: pure use
        return default


def blocked(findings: list[Finding]) -> GateResult:
    """The refusal for these findings (all of one family, the first one's)."""
    family = findings[0].family
    kinds = ", ".join(sorted({f.kind for f in findings}))
    return GateResult(False, family, _MESSAGES[family].format(kinds=kinds), tuple(findings))


def check(text: str) -> GateResult:
    """Run every check on ``text``; the first failing family is the reason."""
    text = text or ""
    families = [
        secret_findings(text),
        unstable_findings(text),
        size_findings(
            text,
            min_chars=_setting("MEMORY_MIN_CONTENT_CHARS", DEFAULT_MIN_CHARS),
            min_words=_setting("MEMORY_MIN_CONTENT_WORDS", DEFAULT_MIN_WORDS),
            max_specific_ratio=_setting("MEMORY_MAX_SPECIFIC_RATIO", DEFAULT_MAX_SPECIFIC_RATIO),
        ),
    ]
    for findings in families:
        if findings:
            return blocked(findings)
    return GateResult(True)
