"""The memory write-gate: decides whether a lesson may be stored.

``check(text)`` answers a :class:`GateResult`. Checks run in this order and the
first failing family names the reason:

1. ``secret``: ``memories.secrets`` — API keys and tokens (detect-secrets' plugins and the
   project's own patterns), private key blocks, cards that pass the Luhn check, connection
   strings with credentials, passwords and passphrases in ``key=value`` form or in prose, credentials
   given as command-line flags (``curl -u user:pass``, ``mysql -p<pw>``, ``--token <x>``), also
   when disguised (spaced, concatenated, reversed, base64/hex/%-encoded, homoglyphs, zero-width).
2. ``unstable``: facts that will not stay true: relative dates ("today",
   "right now", "next week", "3 days ago"), prices, amounts of money and balances (not a limit: "above 1000 EUR").
3. ``too_short`` / ``too_specific``: too few words to be reusable, or mostly
   one-off identifiers (UUIDs, e-mail addresses, IP addresses, long numbers).

``redact(text)`` replaces every secret span with ``[REDACTED:<kind>]``; the
quarantine keeps only that redacted preview, never the secret.
Pure functions, no Django models; thresholds come from settings when Django is
configured and fall back to the defaults here.
"""

import re
from dataclasses import dataclass, field

from memories.secrets import find_secrets
from memories.secrets import redact as secrets_redact
from memories.secrets.prose import as_password
from memories.secrets.rules import CLAUSE_END, _is_placeholder, format_term, luhn_valid

__all__ = [
    "Finding",
    "GateResult",
    "answered_secrets",
    "blocked",
    "check",
    "found_secrets",
    "luhn_valid",
    "redact",
    "redact_known",
    "redact_values",
    "secret_findings",
    "value_findings",
]

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


# --- Secrets: memories.secrets (text views against disguises, detect-secrets plugins, the project's rules) ---


def secret_findings(text: str) -> list[Finding]:
    """Every secret in ``text`` (kind and span in the original text), as the gate's findings."""
    return [Finding(SECRET, f.kind, f.start, f.end) for f in find_secrets(text or "")]


def redact(text: str) -> str:
    """The text with each secret span replaced by ``[REDACTED:<kind>]`` (re-scanned until nothing is left)."""
    return secrets_redact(text or "")


# --- A secret asked for in the question and given in the answer ---

# "What's the admin password for staging?", "the wifi password?", "the PIN for the alarm?", "the door code?"
_SECRET_NOUN = (
    r"(?:pass(?:word|phrase|code)s?|passwd|pwd|pin|pin\s*codes?|secret|credentials?|api[\s_-]*keys?|token|"
    r"(?:door|alarm|gate|safe|lock|garage|entry|access|building|wi-?fi|network|security|unlock)\s+"
    r"(?:codes?|keys?|combinations?))"
)
# a question that asks for the value, not about it ("how do I reset my password", "which token format", "the password
# policy" ask about one)
_ASKS_FOR_SECRET = re.compile(
    r"(?i)\b(?:what(?:'s|\s+is|\s+are|\s+was|\s+were)|which|tell\s+me|give\s+me|remind\s+me|send\s+me|share|"
    # "do you know the wifi password", not "do you know where / how / if ..." (about the secret, not for it)
    r"(?:do|does|did)\s+(?:you|anyone|someone|somebody)\s+(?:know|have|remember|recall)"
    r"(?!\s+(?:where|how|why|when|who|whom|whose|if|whether)\b)|"
    r"(?:can|could|would)\s+(?:you|someone|somebody)\s+(?:tell|give|send|remind|share|find)|(?:i|we)\s+need)\b"
    rf"[^?\n]{{0,80}}?\b{_SECRET_NOUN}\b(?!\s+(?:format|policy|policies|length|rules?|requirements?|expir\w*|reset|"
    r"manager|field|type|strength|complexity|hash\w*|storage|rotation|scheme|algorithm|lifetime|ttl|duration|size|"
    r"limit|count|header|endpoint|url|scopes?|permissions?)\b)"
)
# a question that is only the thing asked for: "Staging admin password?", "wifi password for the guest network?",
# "The door code?" (not a yes/no or how question: "Is there a wifi password?", "How do I change password?")
_NAMES_SECRET = re.compile(
    r"(?i)^\W*(?!(?:how|why|when|where|who|should|shall|can|could|do|does|did|is|are|was|were|will|would|has|have|"
    r"must|may|any)\b)(?:[\w\-]+\s+){0,4}?"
    rf"{_SECRET_NOUN}(?:\s+(?:for|of|to|on|at|in)\s+[^?\n]{{1,40}}?)?\s*\?+\s*$"
)
_ANSWER_TOKEN = re.compile(r"[^\s,;()\[\]{}<>\"'`]+")
_NOT_A_SECRET_VALUE = re.compile(
    r"(?i)^(?:https?://\S+|[\w.+\-]+@[\w\-]+\.[\w.\-]+|/\S*|~/\S*|\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?|"
    r"v?\d+(?:\.\d+)+|\d{1,2}:\d{2}(?::\d{2})?(?:am|pm)?|\d{4}-\d{2}-\d{2}|\d+(?:st|nd|rd|th|s|h|m|d|ms|kb|mb|gb|%)?)$"
)


def _answer_secret_values(answer: str) -> list[tuple[int, int]]:
    """Spans of the values in an answer to a question that asks for a secret: a PIN (4-8 digits) or a token of
    letters and digits (a password such as "Hunter2Staging!9" or "bluebird42"), not an address, a path, a version,
    a time or a count."""
    spans = []
    for m in _ANSWER_TOKEN.finditer(answer):
        token = m.group(0).rstrip(".,:;!?")
        if (
            len(token) < 4
            or _is_placeholder(token)
            or format_term(token)
            or token.lower() in _NO_VALUE
            or _CONSTANT_NAME.fullmatch(token)
        ):
            continue
        end = m.start() + len(token)
        pin = (
            token.isdigit()
            and 4 <= len(token) <= 8
            and not re.fullmatch(r"(?:19|20)\d\d", token)  # a year
            and not _UNIT.match(answer, end)  # a count: "3600 seconds"
        )
        acronym = re.fullmatch(r"[A-Z]{2,}[-_]?\d+", token)  # RS256, RFC7519, HTTP2
        if token.count(":") > 1 or "==" in token:  # an ARN, a URN, a pinned requirement ("pytest==8.2")
            continue
        if not pin and (_NOT_A_SECRET_VALUE.match(token) or acronym or not as_password(token)):
            continue
        spans.append((m.start(), m.start() + len(token)))
    return spans


# words that make a question about secrets rather than for one, wherever they stand: "the requirements for a PIN"
_ABOUT_SECRETS = re.compile(
    r"(?i)\b(?:format|policy|policies|length|rules?|requirements?|expir\w*|reset|manager|strength|complexity|"
    r"rotation|scheme|algorithm|lifetime|ttl|duration|limit|used\s+for|work|works|stored|hashed)\b"
)
# what follows a number that counts something ("3600 seconds", "12 characters"): not a PIN
_UNIT = re.compile(
    r"\s+(?:seconds?|secs?|minutes?|mins?|hours?|days?|weeks?|months?|years?|ms|characters?|chars?|digits?|letters?|"
    r"times|users?|requests?|rows?|items?|bytes?|kb|mb|gb|tb|px|percent|ports?|retries|attempts?)\b",
    re.IGNORECASE,
)


# a code typed with separators: "12-34-56", "4829#", "*1234#", "48 29 13" (4-8 digits in all)
_SEPARATED_CODE = re.compile(r"(?<![\w.:/\-])[*#]?\d{1,4}(?:[- ]\d{1,4}){0,3}#?(?![\w.:/\-])")
# what an answer says before the value itself: "It's swordfish", "The wifi password is swordfish", "Use swordfish"
_LEAD_IN = re.compile(
    r"(?i)^(?:(?:it's|it\s+is|that's|that\s+is|use|try|type|enter)\s+|"
    r"(?:the\s+|our\s+|my\s+)?(?:[\w\-]+\s+){0,3}?" + _SECRET_NOUN + r"(?:\s+(?:is|was)\s+|\s*:\s*)|" + _SECRET_NOUN + r"\s*:\s*)"
)
# the value stated after "is": "the password is swordfish.", "it is guestnetwork, all lowercase"
# a value stated as one word: 4 to 64 characters up to a space, a quote, a bracket or punctuation
_VALUE = r"(?P<value>[^\s,;.!?()\[\]{}<>\"'`]{4,64})"
_IS_VALUE = re.compile(r"(?i)\b(?:is|was|:)\s+" + _VALUE + r"(?=\s*(?:[.,;!]|$))")
_QUOTED = re.compile(r"[\"'`\u201c\u2018](?P<value>[^\s\"'`\u201d\u2019]{4,64})[\"'`\u201d\u2019]")
# a number after these is a phone number; a quoted word after these names an entry, a folder or a menu
_PHONE_BEFORE = re.compile(r"(?i)\b(?:call|phone|tel|telephone|fax|dial|ext|extension|number|mobile|cell)\b\W*$")
# a number after these is a place in a text or a list, not a code: "page 12-14", "steps 3-5"
_PLACE_BEFORE = re.compile(r"(?i)\b(?:pages?|pp?\.?|sections?|chapters?|steps?|lines?|items?|rows?|rooms?|floors?)\s*$")
# an environment variable's or a constant's name: what holds the secret, not the secret
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_NAMED_BEFORE = re.compile(
    r"(?i)\b(?:under|in|named|called|titled|labell?ed|folder|entry|item|vault|section|tab|menu|page|channel)\s*$"
)
_NO_VALUE = {
    *("none", "unknown", "unset", "empty", "blank", "nothing", "same", "default", "different", "yes", "nope"),
    # where secrets are kept, and kinds of credentials: what an answer about a secret names, not its value
    *("1password", "bitwarden", "lastpass", "keepass", "keepassxc", "keychain", "vault", "dashlane", "passbolt"),
    *("bearer", "basic", "digest", "jwt", "oauth", "oauth2", "saml", "sso", "ldap", "kerberos", "totp", "hmac", "mtls"),
}


# what a short answer says of a secret rather than giving it: "it is long, 16 characters", "that's correct."
_DESCRIBES_SECRET = {
    *("long", "short", "weak", "strong", "fine", "good", "wrong", "right", "correct", "incorrect", "valid", "invalid"),
    *("secret", "private", "public", "confidential", "sensitive", "simple", "complex", "easy", "hard", "random"),
    *("unique", "personal", "shared", "current", "temporary", "permanent", "mandatory", "optional", "free", "open"),
    *("closed", "gone", "down", "there", "here", "below", "above", "attached", "online", "offline", "lowercase"),
    *("uppercase", "numeric", "alphanumeric", "new", "old", "this", "that", "mine", "yours", "ours", "theirs"),
}
# the first word after an answer's "it is" / "the password is" lead-in, when it ends the clause: "it is dragon, all
# lowercase" (not after "use", "try": "Use caution, it changes weekly" gives advice)
_FIRST_VALUE = re.compile(_VALUE + r"(?=\s*(?:[.,;!?(]|\s[-\u2013\u2014]\s|$))")
_ADVICE = re.compile(r"(?i)^(?:use|try|type|enter)\b")
_NAMES_NOUN = re.compile(rf"(?i)\b{_SECRET_NOUN}\b")
# what may open an answer before its lead-in: "Sure, it's dragon", "Yes! It is dragon."
_OPENING = re.compile(r"(?i)^(?:sure|yes|yeah|yep|ok|okay|of\s+course)\b[\s,!.]*")
# how a value is spelt, said right after it: "it is dragon, all lowercase" (not "it's strange, it worked yesterday")
_SPELLING_AFTER = re.compile(
    r"(?i)\s*[,;:(\-\u2013\u2014]*\s*(?:all\s+|in\s+|with\s+an?\s+|first\s+letter\s+)?(?:(?:lower|upper)[\s-]?case|"
    r"capitals?|caps|case[\s-]sensitive|spel(?:led|t)|no\s+spaces|one\s+word|\d+\s+(?:characters|letters))\b"
)


def _plain_value(token: str, *, rare: bool) -> bool:
    """``token`` can be a secret given without digits: not a placeholder, an address, a path, a version or a time; not
    a word that means no value; with ``rare``, a word English seldom uses (wordfreq Zipf below 3.5: "swordfish", not
    "required") and no participle or adverb ("rotated", "weekly")."""
    low = token.lower()
    if len(token) < 4 or low in _NO_VALUE or _is_placeholder(token) or _NOT_A_SECRET_VALUE.match(token):
        return False
    if _CONSTANT_NAME.fullmatch(token) or (token.isalpha() and re.search(r"(?:ed|ing|able|ible|ly)$", low)):
        return False
    if not rare:
        return True
    from wordfreq import zipf_frequency  # here: importing it takes about a second (learning.preload loads it early)

    return zipf_frequency(low, "en") < 3.5


def _stated_value(token: str) -> bool:
    """``token``, all an answer states after its lead-in, can be the secret: a plain value that does not describe one."""
    return token.lower() not in _DESCRIBES_SECRET and _plain_value(token, rare=False)


def _plain_secret_values(answer: str) -> list[tuple[int, int]]:
    """Spans of values without digits, or with separators, in an answer to a question that asks for a secret: the
    whole answer after its lead-in ("swordfish", "It's swordfish.", "Sure, swordfish"), the word that ends the
    lead-in's clause when the lead-in names the secret ("the password is dragon, ask Bob") or the clause after it
    says how it is spelt ("it is dragon, all lowercase"), a quoted word, a rare word stated after "is", a code typed with separators ("12-34-56",
    "4829#")."""
    spans = []
    for m in _SEPARATED_CODE.finditer(answer):
        digits = sum(c.isdigit() for c in m.group(0))
        plain = m.group(0).isdigit()  # a bare PIN is ``_answer_secret_values``'s
        before = answer[max(0, m.start() - 20) : m.start()]
        phone = re.fullmatch(r"\d{3}-\d{4}", m.group(0)) or _PHONE_BEFORE.search(before)
        if 4 <= digits <= 8 and not plain and not phone and not _PLACE_BEFORE.search(before) and not _UNIT.match(answer, m.end()):
            spans.append(m.span())
    stripped = answer.strip()
    opening = _OPENING.match(stripped)
    base = answer.index(stripped) + (opening.end() if opening else 0)  # where the answer proper starts
    lead = _LEAD_IN.match(answer[base:].rstrip())
    offset = base + (lead.end() if lead else 0)
    rest = answer[offset:].strip().rstrip(".!;, ")
    if rest and not re.search(r"\s", rest) and _stated_value(rest):
        start = answer.index(rest, offset)
        spans.append((start, start + len(rest)))
    if lead and not _ADVICE.match(lead.group(0)):
        # the word that ends the lead-in's clause: after "the password is", or spelt out after "it is"
        first = _FIRST_VALUE.match(answer, offset)
        if first and _stated_value(first.group("value")):
            if _NAMES_NOUN.search(lead.group(0)) or _SPELLING_AFTER.match(answer, first.end("value")):
                spans.append(first.span("value"))
    for m in _QUOTED.finditer(answer):
        if not _NAMED_BEFORE.search(answer[max(0, m.start() - 20) : m.start()]) and _plain_value(m.group("value"), rare=False):
            spans.append(m.span("value"))
    for m in _IS_VALUE.finditer(answer):
        if _plain_value(m.group("value"), rare=True):
            spans.append(m.span("value"))
    return spans


def answered_secrets(question: str, answer: str) -> list[str]:
    """The values the answer gives when the question asks for a password, PIN, code, key or token: stored as a
    lesson ("Q: ... A: Hunter2Staging!9") or alone, each would be a secret the gate's other rules cannot see (the
    word that names it is in the question, the value alone in the answer)."""
    question = question or ""
    asked = _ASKS_FOR_SECRET.search(question) or _NAMES_SECRET.search(question)
    if asked is None or _ABOUT_SECRETS.search(question):
        return []
    answer = answer or ""
    spans = sorted(set(_answer_secret_values(answer)) | set(_plain_secret_values(answer)))
    return list(dict.fromkeys(answer[i:j] for i, j in spans))


def value_findings(text: str, values: list[str]) -> list[Finding]:
    """Where ``values`` (from ``answered_secrets``) occur in ``text``, as the gate's secret findings."""
    out = []
    for value in sorted(set(values), key=len, reverse=True):
        for m in re.finditer(rf"(?<![\w]){re.escape(value)}(?![\w])", text):
            out.append(Finding(SECRET, "secret_in_answer", m.start(), m.end()))
    return sorted(out, key=lambda f: (f.start, -f.end))


def redact_values(text: str, values: list[str]) -> str:
    """``redact(text)`` with each of ``values`` replaced too."""
    return redact_known(text, values=values)


# a secret found elsewhere is replaced wherever it occurs when it is at least this long (a shorter one only where found)
_MIN_FOUND_CHARS = 3


def found_secrets(text: str, findings: list[Finding]) -> dict[str, str]:
    """The text of each secret finding in ``text`` (its span's text) and its kind: what ``redact_known`` replaces
    wherever it occurs."""
    found: dict[str, str] = {}
    for f in findings:
        secret = text[f.start : f.end].strip() if f.family == SECRET and f.start >= 0 else ""
        if len(secret) >= _MIN_FOUND_CHARS:
            found.setdefault(secret, f.kind)
    return found


def redact_known(
    text: str, *, spans: list[tuple[int, int, str]] = (), found: dict[str, str] | None = None, values: list[str] = ()
) -> str:
    """``redact(text)`` after replacing what the gate found, here or elsewhere: the ``spans`` of ``text`` (start, end,
    kind), every occurrence of each secret of ``found`` (``found_secrets``) and each of ``values``
    (``answered_secrets``, as whole words)."""
    text = text or ""
    marks = [(i, j, kind) for i, j, kind in spans if 0 <= i < j]
    for secret, kind in (found or {}).items():
        marks += [(m.start(), m.end(), kind) for m in re.finditer(re.escape(secret), text)]
    for value in set(values):
        marks += [(m.start(), m.end(), "secret_in_answer") for m in re.finditer(rf"(?<![\w]){re.escape(value)}(?![\w])", text)]
    pieces, last = [], 0
    for i, j, kind in sorted(marks):
        if i < last:  # overlapping: extend the previous redaction
            last = max(last, j)
            continue
        pieces += [text[last:i], f"[REDACTED:{kind}]"]
        last = j
    return redact("".join(pieces) + text[last:])


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


# An amount after a comparison in a rule is a limit someone chose ("confirm transfers above 1000 EUR by phone", "alert
# me when spending goes over £200", "the daily ATM limit is 500 EUR"), which stays true until they change it: the
# clause must say it is a rule (a limit, a condition, an instruction) and price nothing ("the fee is over €2", "costs
# more than $20", "AAPL closed above $190", "rent went up to $2,000" are amounts that move).
_LIMIT_BEFORE = re.compile(
    r"(?i)\b(?:above|over|under|below|exceeding|beyond|more than|less than|at least|at most|up to|no more than|"
    r"limit of|limit is|limited to|threshold of|maximum of|minimum of|cap of|capped at)\s*+$"
)
_A_RULE = re.compile(
    r"(?i)\b(?:limits?|threshold|caps?|capped|maximum|minimum|max|min|budget|alert|alerts|notify|warn|flag|confirm|"
    r"confirmed|approve|approval|approved|require|requires|required|need|needs|must|should|escalate|review|reviewed|"
    r"report|reported|trigger|triggers|block|blocked|allow|allowed)\b"
)
_PRICED = re.compile(
    r"(?i)\b(?:price[sd]?|costs?|costing|fees?|charges?|charged|pay|pays|paid|rates?|balance|worth|trades?|traded|"
    r"trading|closed|opened|rent|salary|savings|subscription|debt|loan|earns?|earned|income|valued|portfolio|stock|"
    r"shares|has|had)\b"
)


def _a_limit(prose: str, start: int) -> bool:
    """The amount at ``start`` follows a comparison, in a clause that states a rule and prices nothing."""
    before = prose[max(0, start - 200) : start]
    if not _LIMIT_BEFORE.search(before[-30:]):
        return False
    cut = [m.end() for m in CLAUSE_END.finditer(before)]
    after = prose[start : start + 200]
    end = CLAUSE_END.search(after)
    clause = before[cut[-1] if cut else 0 :] + after[: end.start() if end else len(after)]
    return bool(_A_RULE.search(clause)) and not _PRICED.search(clause)


def unstable_findings(text: str) -> list[Finding]:
    prose = _CODE.sub(lambda m: " " * len(m.group(0)), text)  # code never counts as a relative date or price
    out = []
    for kind, pattern in _UNSTABLE_PATTERNS:
        for m in pattern.finditer(prose):
            if kind == "price" and _a_limit(prose, m.start()):
                continue
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
