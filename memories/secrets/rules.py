"""Secret scanning, part 2: value rules, detect-secrets plugin regexes and the project's own patterns."""

import bisect
import functools
import math
import re
from dataclasses import dataclass

from detect_secrets.filters import heuristic as ds_heuristic
from detect_secrets.plugins import keyword as ds_keyword
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

# =============================================================================================
# Detectors
# =============================================================================================

# Words that follow "password is ..." in clean lessons and are not themselves a password (project list).
_PROSE_NOT_A_SECRET = set(
    """
    a an the is are be been being not no never now set reset changed stored hashed salted encrypted required
    optional mandatory incorrect correct wrong invalid valid expired expiring weak strong case-sensitive
    case-insensitive sensitive too at least longer shorter missing empty blank rotated managed kept saved sent
    checked validated compared generated randomly random only also still never always usually typically
    different same unique secret private hidden masked shown displayed visible long short minimum maximum
    in on of for to from with by via after before when if that which what this it its your their our my his her
    manager policy policies field fields prompt prompts reset link links form page dialog screen rules rule
    hint hints length complexity expiry expiration change changes update updates recovery protected
    """.split()
)
# Function words: a spaced-out token's match is cut before one of these ("... xY5 as the password").
_STOPWORDS = set(
    """
    a an the and or but nor so yet as at by for from in into of on onto to with without via per is are was were
    be been it its this that these those then than there here when where which who whom whose while if
    please pls use used using keep kept it's we you they he she i my our your their his her
    """.split()
)

_PLACEHOLDER = re.compile(
    r"^(?:<[^>]*>|\$\{[^}]*\}|\$[A-Z_][A-Z0-9_]*|%\(?[\w]+\)?s?|\{\{[^}]*\}\}|\*+|x{3,}|\.{3,}|…|"
    r"none|null|nil|true|false|empty|redacted|changeme|placeholder|your[_-]?\w*|example\w*|"
    r"os\.environ.*|env\(.*|getenv\(.*|process\.env.*|settings\.\w+|config\.\w+|secrets?\.\w+|\[redacted[^\]]*\]?.*)$",
    re.IGNORECASE,
)


def _is_placeholder(value: str) -> bool:
    value = value.strip().rstrip(".")
    return bool(_PLACEHOLDER.match(value)) or value.lower() in {"", "...", "string", "str", "int", "value"}


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


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


_SECRET_WORD_NAMES = re.compile(
    r"(?i)password|passwd|passphrase|pwd|pin|passcode|pass\b|(?<![a-z])(?:pw|psk)(?![a-z])|pre-?shared"
)
_VERSION = re.compile(r"(?i)^v?\d+(?:\.\d+)+[a-z0-9\-]*$")
# encodings and algorithms: "the password is base64 encoded", "credentials are stored as sha256"
_FORMAT_WORD = re.compile(
    r"(?i)^(?:base(?:16|32|36|58|62|64|85)|sha-?(?:1|2|3|224|256|384|512)|sha3(?:-\d+)?|md[245]|utf-?(?:8|16|32)|"
    r"aes-?\d+(?:-[a-z]+)?|pbkdf2(?:[-_]\w+)?|argon2(?:id|i|d)?|bcrypt|scrypt|rot13|crc32|x509|pkcs#?\d+|ed25519|rsa-?\d+|"
    r"hmac-?sha-?\d+|ntlmv?2|kerberos5|oauth2|k8s|ldapv3|tls1\.?[0-3]|ipv[46]|uuid[1-8]?|json5|utf8mb[34]|"
    r"wpa[23]?(?:-psk|-enterprise)?)$"
)


# What code reads a secret from: an object and its attributes, items or a call ("request.POST[", "config.db.password",
# "getpass.getpass(", "req.body.password"). The object is a plain snake_case or camelCase name without digits, so a
# dotted literal ("p4ss.w0rd", "Sup3r.S3cret") stays a value.
_CODE_OBJECT = r"_{0,2}[a-z]+(?:_[a-z]+)*|[a-z]+(?:[A-Z][a-z]+)+"
_CODE_ATTRIBUTE_OR_ITEM = re.compile(rf"(?:{_CODE_OBJECT})(?:\.[A-Za-z_]\w*)*(?:\.[A-Za-z_]\w*|[\[(].*)")
# a variable: snake_case or camelCase of letters ("raw_password", "confirm_password", "userInput")
_CODE_VARIABLE = re.compile(r"_{0,2}[a-z]+(?:_[a-z]+)+|[a-z]+(?:[A-Z][a-z]+)+")
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_SECRET_NAME_PARTS = {"password", "passwd", "passphrase", "pwd", "pw", "pass", "pin", "psk", "secret", "token", "key"}
# words of a variable's name that say where a value comes from or what code does with it ("user_input", "rawValue")
_CODE_NAME_WORDS = set(
    """
    input inputs value val vals raw plain plaintext new old hashed hash encrypted decrypted encoded decoded cleaned
    current confirm confirmed given provided entered typed submitted stored saved user form request req data param
    params arg args kwargs field var tmp temp default env environ config cfg conf settings get str text string bytes
    buf result res response resp body payload obj item entry self cls
    """.split()
)
# words of a snake_case value that leave the secret out ("not_set", "see_vault", "tbd_later", "your_password_here") or
# name where it is kept ("secret_name", "vault_ref", "key_id"): a placeholder, not a literal
_PLACEHOLDER_NAME_WORDS = set(
    """
    not no none null nil see tbd todo fixme your unset unknown missing changeme placeholder dummy fake sample example
    name names ref refs reference id ids path file filename arn uri url
    """.split()
)
# the secret words of a name and a value, the same whatever their spelling ("DB_PASS" names a "db_password_prod")
_CANONICAL_SECRET_WORD = dict.fromkeys(("pass", "passwd", "pwd", "pw", "passphrase"), "password")
# a line of code beside the assignment: a keyword, a call, a block or statement end, a comparison
_CODE_LINE = re.compile(
    r"\b(?:const|let|var|def|return|elif|import|lambda|function|async|await|class)\b|\bif\s|\b(?:self|this)\.|"
    r"\w\(|[;{}]\s*+$|\)\s*+:?\s*+$|==|!=|&&|\|\|"
)


@functools.lru_cache(maxsize=8)
def _code_lines(text: str) -> tuple[list[int], list[bool]]:
    """Where each line of ``text`` starts and whether it is code: read once per text, not once per value in it (a text
    of many assignments would otherwise be read whole for each)."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]
    return starts, [bool(_CODE_LINE.search(line)) for line in text.split("\n")]


def _in_code(text: str, at: int) -> bool:
    """The line of ``text`` holding ``at``, or the line before or after it, is code ("const password = userInput;",
    "password = hunter_two" under "def connect():"); a lone ``KEY=value`` line (.env, YAML) is not."""
    starts, code = _code_lines(text)
    k = bisect.bisect_right(starts, at) - 1
    return any(code[max(0, k - 1) : k + 2])


def is_code_reference(name: str, value: str, text: str = "", at: int = -1) -> bool:
    """An unquoted ``value`` of ``name`` that is code naming where the secret comes from, not the secret: an
    attribute, an item or a call; a word or variable repeating the name's own secret word ("password=password",
    "pwd=PWD", "confirm_password"); a snake_case or camelCase variable with a word of code ("user_input") or on a line
    of code (``text`` around ``at``). "PASSWORD=hunter_two", "db_password: my_secret_pw" are values."""
    if _CODE_ATTRIBUTE_OR_ITEM.fullmatch(value):
        return True
    if not re.fullmatch(r"[A-Za-z_]+", value):
        return False
    name_words = {w.lower() for w in _NAME_PARTS.findall(name)} & _SECRET_NAME_PARTS
    value_words = {w.lower() for w in _NAME_PARTS.findall(value)}
    # the name's abbreviation read as the word it shortens ("DB_PASS", "pwd"), the value's words as written: a value
    # that spells out the name's secret word refers to it ("DB_PASS=db_password_prod"); one that shortens it is a
    # literal made of words ("db_password: my_secret_pw")
    if (name_words | {_CANONICAL_SECRET_WORD.get(w, w) for w in name_words}) & value_words:
        return True
    if not _CODE_VARIABLE.fullmatch(value):
        return False
    if value_words & _PLACEHOLDER_NAME_WORDS:
        return True  # "password: not_set", "password = secret_name"
    return bool(value_words & _CODE_NAME_WORDS) or (at >= 0 and _in_code(text, at))


def _value_is_secret(name: str, value: str, quoted: bool = False, text: str = "", at: int = -1) -> bool:
    """The project's rule for a value assigned to / introduced by a secret-sounding name (``text`` and ``at``: where
    it stands, to tell a variable on a line of code from a literal)."""
    value = value.strip().rstrip(".),;:!?")
    if _is_placeholder(value) or (value.lower() in _PROSE_NOT_A_SECRET and not quoted):
        return False
    if re.match(r"(?i)^[\w.]+\(", value) or value.startswith(("$", "{", "[", "(", "<")):
        return False  # a function call, variable, template or structure, not a literal
    if not quoted and is_code_reference(name, value, text, at):
        return False
    if ds_heuristic.is_templated_secret(value) or ds_heuristic.is_indirect_reference(f"x = {value}"):
        return False
    if _FORMAT_WORD.match(value):
        return False  # "password_hash=bcrypt"
    if _SECRET_WORD_NAMES.search(name):
        return len(value) >= 4
    # token / key / secret names: a literal that looks random
    if len(value) < 8 or value.isdigit():
        return False
    if re.fullmatch(r"[a-z_]+", value):  # an identifier such as token=refresh_token
        return False
    return _entropy(value) >= 2.5


@dataclass(frozen=True)
class _Rx:
    kind: str
    pattern: re.Pattern
    group: int = 0
    validate: object = None  # callable(value) -> bool
    collapsible: bool = True  # also run on collapsed / reversed views
    needles: tuple[str, ...] = ()  # cheap pre-check: one of these substrings must occur


# detect-secrets' ``RegexBasedDetector.build_assignment_regex`` (IBM Cloud IAM, IBM COS HMAC, Cloudant, SoftLayer)
# writes the assignment as "optional spaces, an operator or spaces, optional spaces": three quantifiers that can all
# take the same run of spaces, so a keyword ("password", "key", "token") before N spaces costs N^3 steps ("what is
# the password" + 2,000 spaces: 32 s). The same language with each run of spaces taken whole: a value never starts
# with a space, "=", ":" or ">", so nothing is lost by not giving any back.
_DS_ASSIGNMENT = "(?: *)(?:=|:|:=|=>| +|::)(?: *)"
_LINEAR_ASSIGNMENT = "(?> *+(?:=>|::|:=|=|:) *+| ++)"


def linear_assignment(rx: re.Pattern) -> re.Pattern:
    """``rx`` with detect-secrets' backtracking assignment (see ``_DS_ASSIGNMENT``) made possessive."""
    if _DS_ASSIGNMENT not in rx.pattern:
        return rx
    return re.compile(rx.pattern.replace(_DS_ASSIGNMENT, _LINEAR_ASSIGNMENT), rx.flags)


def _ds(kind: str, plugin_cls, index: int = 0, group: int = 0, validate=None, collapsible: bool = True, needles=()) -> _Rx:
    return _Rx(kind, linear_assignment(plugin_cls.denylist[index]), group, validate, collapsible, tuple(needles))


def _aws_id_ok(v: str) -> bool:
    return any(c.isdigit() for c in v[4:])  # 16 random base32 chars without a digit: ~0.5% of real keys


_JWT = JwtTokenDetector()

# Prefix-anchored token detectors. detect-secrets plugins first, then the project's own patterns
# for formats detect-secrets lacks or matches too narrowly (e.g. its GitHub regex wants exactly 36
# chars, its OpenAI regex wants the legacy "T3BlbkFJ" marker, its Stripe regex live keys only).
_STRUCTURED: list[_Rx] = [
    _ds("aws_access_key", AWSKeyDetector, 0, validate=_aws_id_ok, needles=("A3T", "ABIA", "ACCA", "AKIA", "ASIA")),
    _ds("github_token", GitHubTokenDetector, needles=("gh",)),
    *[_ds("gitlab_token", GitLabTokenDetector, i, needles=("gl", "GR1348941")) for i in range(len(GitLabTokenDetector.denylist))],
    _ds("openai_key", OpenAIDetector, needles=("T3BlbkFJ",)),
    _ds("slack_token", SlackDetector, 0, needles=("xox", "XOX", "Xox")),
    _ds("slack_webhook", SlackDetector, 1, needles=("hooks.",)),
    _ds("stripe_key", StripeDetector, needles=("k_live_",)),
    _Rx("jwt", JwtTokenDetector.denylist[0], 0, _JWT.is_formally_valid, needles=("eyJ",)),
    _ds("sendgrid_key", SendGridDetector, needles=("SG.",)),
    *[_ds("pypi_token", PypiTokenDetector, i, needles=("pypi-",)) for i in range(len(PypiTokenDetector.denylist))],
    _ds("square_oauth_secret", SquareOAuthDetector, needles=("sq0csp-",)),
    _ds("azure_storage_key", AzureStorageKeyDetector, collapsible=False, needles=("AccountKey=",)),
    _ds("discord_token", DiscordBotTokenDetector, collapsible=False),
    *[
        _ds("twilio_key", TwilioKeyDetector, i, collapsible=False, needles=("AC", "SK"))
        for i in range(len(TwilioKeyDetector.denylist))
    ],
    _ds("mailchimp_key", MailchimpDetector, collapsible=False, needles=("-us",)),
    _ds("telegram_token", TelegramBotTokenDetector, collapsible=False, needles=(":",)),
    # project patterns
    _Rx(
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
        needles=("gh", "github_pat_"),
    ),
    _Rx("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), needles=("glpat-",)),
    _Rx("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), needles=("sk-ant-",)),
    _Rx("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"), needles=("sk-",)),
    _Rx("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), needles=("_live_", "_test_")),
    _Rx("stripe_webhook_secret", re.compile(r"\bwhsec_[A-Za-z0-9]{20,}"), needles=("whsec_",)),
    _Rx("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), needles=("xox",)),
    _Rx(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_\-]+"),
        needles=("hooks.slack",),
    ),
    _Rx("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), needles=("AIza",)),
    _Rx("google_oauth_secret", re.compile(r"\bGOCSPX-[A-Za-z0-9_\-]{20,}"), needles=("GOCSPX-",)),
    _Rx("google_refresh_token", re.compile(r"\b1//0[A-Za-z0-9_\-]{30,}"), needles=("1//0",)),
    _Rx("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"), needles=("SG.",)),
    _Rx("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), needles=("npm_",)),
    _Rx("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), needles=("hf_",)),
    _Rx("azure_client_secret", re.compile(r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"), needles=("Q~",)),
    _Rx("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), needles=("eyJ",)),
]

# Context detectors from detect-secrets that only make sense on the canonical text.
_DS_CONTEXT: list[_Rx] = [
    _ds("aws_secret_key", AWSKeyDetector, 1, group=1, collapsible=False, needles=("aws",)),
    _ds("basic_auth_credentials", BasicAuthDetector, group=1, collapsible=False, needles=("://",)),
    _ds("npm_token", NpmDetector, group=1, collapsible=False, needles=("_authtoken",)),
    _ds("ibm_cloud_iam_key", IbmCloudIamDetector, group=1, collapsible=False, needles=("key", "pass", "pwd", "token")),
    _ds("ibm_cos_hmac", IbmCosHmacDetector, group=1, collapsible=False, needles=("secret",)),
    *[
        _ds("cloudant_credentials", CloudantDetector, i, group=1, collapsible=False, needles=("cl",))
        for i in range(len(CloudantDetector.denylist))
    ],
    *[
        _ds("softlayer_credentials", SoftlayerDetector, i, group=1, collapsible=False, needles=("sl", "softlayer"))
        for i in range(len(SoftlayerDetector.denylist))
    ],
]
_ARTIFACTORY = ArtifactoryDetector.denylist
_PRIVATE_KEY_HEADERS = PrivateKeyDetector.denylist
_PRIVATE_KEY_BLOCK_END = re.compile(r"-----END [A-Z0-9 ]*(?:PRIVATE KEY(?: BLOCK)?|KEY)-----|---- END SSH2 [A-Z ]+----")

# detect-secrets KeywordDetector regexes (module-level in detect_secrets.plugins.keyword), with the
# capture group holding the value. The secret group of these regexes runs to the end of the line
# (they are written for one assignment per line of code); in prose we keep its first token.
_DS_KEYWORD: list[tuple[re.Pattern, int]] = [
    *ds_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items(),
    *ds_keyword.CONFIG_DENYLIST_REGEX_TO_GROUP.items(),
    *ds_keyword.GOLANG_DENYLIST_REGEX_TO_GROUP.items(),
]
_DS_KEYWORD = list(dict(_DS_KEYWORD).items())  # dedupe
_QUOTE_CHARS = "\"'`"
# cheap pre-checks: each family of context detectors runs only when its hint occurs
_KEYWORD_HINT = re.compile("|".join(ds_keyword.DENYLIST) + "|contrase", re.IGNORECASE)
_KV_HINT = re.compile(r"(?i)pass|pw|psk|secret|key|token|credential")
_CONNECTION_HINT = re.compile(r"(?i)://|=|bearer|token|authorization")
_PROSE_HINT = re.compile(r"(?i)pass|pw|psk|pin\b|secret|key|token|cred|login")
# one-time-password seeds and door / alarm / safe codes (``detectors._codes``)
_CODES_HINT = re.compile(r"(?i)otp|2fa|mfa|factor|authenticator|code|pin\b|combination")
_DIGITS_HINT = re.compile(r"\d{4}")

_CONNECTION: list[tuple[str, re.Pattern]] = [
    # scheme://user:password@host (the password part must be non-empty)
    ("credentialed_url", re.compile(r"\b[a-z][a-z0-9+.\-]*://(?P<user>[^\s:/@]*):(?P<value>[^\s@/]+)@[^\s/]+", re.IGNORECASE)),
    # ADO/JDBC/Azure style: Password=...; AccountKey=...; SharedAccessKey=...; sig=...
    (
        "connection_string_secret",
        re.compile(
            r"(?i)\b(?:password|pwd|accountkey|sharedaccesskey|sharedaccesssignature|sig|client_secret|clientsecret)\s*=\s*(?P<value>[^;\s\"'&]{3,})"
        ),
    ),
    ("bearer_token", re.compile(r"(?i)\b(?:bearer|token)\s+(?P<value>[A-Za-z0-9._~+/\-]{20,}=*)")),
    ("basic_auth_header", re.compile(r"(?i)\bauthorization:\s*basic\s+(?P<value>[A-Za-z0-9+/]{12,}=*)")),
]

_KV_NAMES = (
    r"[\w.\-]*?(?:password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|"
    r"auth[_\-]?token|access[_\-]?token|refresh[_\-]?token|client[_\-]?secret|token|credentials?|"
    r"(?<![a-z0-9])(?:pw|psk)(?![a-z0-9]))[\w.\-]*+"  # "pw" / "psk" as a whole part of the name ("db_pw", not "npw")
)
# The name is a whole run of name characters (it starts where the run does and ends where it does), taken at once: a
# run of dots or dashes ("password" + "." * N) would otherwise be tried from each of its characters, N^2 steps.
_KEY_VALUE = re.compile(
    rf"(?i)(?<![\w.\-])(?P<name>(?>{_KV_NAMES}))[\"']?\s*+(?::=|=>|==|=|:)\s*+(?P<q>[\"']?)(?P<value>[^\s\"',;]+)(?P=q)"
)
_PSK_NAMES = r"psk|pre-shared key|preshared key|pre shared key|wi-?fi key|wpa2? key"
_PW_NAMES = (
    r"password|passphrase|pass phrase|passcode|passwd|pwd|pw|pin|pin code|secret key|api key|access key|token|secret|"
    + _PSK_NAMES
)
# "for the admin account on the old NAS": up to eight words (no sentence end); past three, the value must look
# like a password (``looks_like_password``), as a longer qualifier more often ends in prose
_QUALIFIER_WORD = r"[\w@\-'](?:[\w.@\-']*[\w@\-'])?"
_QUALIFIER = rf"(?P<qual>\s+(?:for|to|of|on|at)(?:\s+{_QUALIFIER_WORD}){{1,8}}?)?"
_QUALIFIER_SHORT = 3
# "was set to", "has been changed to", "is now": the value follows a verb
_SET_VERB = r"(?:(?:is|was|are|were|has been|have been|had been|will be|should be|must be)\s+(?:now\s+)?)?(?:set|changed|reset|updated)\s+to"
_PROSE_PASSWORD = re.compile(
    rf"(?i)\b(?P<name>{_PW_NAMES})s?" + _QUALIFIER + rf"(?:\s++(?P<verb>{_SET_VERB}|is now|is still|is|was|are|reads|"
    r"became|should be|will be)\s++|\s*+[:=]\s*+|\s++-\s++)"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,120})(?P=q)|(?P<value>[^\s\"'`]+))"
)
# "Set the admin password to Kx8...", "change the wifi key for the lab to ...": a quoted value, or a bare one that
# looks like a password ("set the password to expire" is about the password)
_PROSE_SET = re.compile(
    r"(?i)\b(?:set|change|changed|reset|update|updated)\s+(?:the\s+|your\s+|my\s+|its\s+|our\s+|their\s+)?"
    rf"(?:[\w\-]+\s+){{0,3}}?(?P<name>password|passphrase|passcode|passwd|pwd|pw|pin|{_PSK_NAMES})s?"
    rf"(?P<qual>\s+(?:for|of|on|at)(?:\s+{_QUALIFIER_WORD}){{1,5}}?)?\s+(?:to|=)\s+"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,120})(?P=q)|(?P<value>[^\s\"'`]+))"
)
# what may follow the name of a secret at the end of "<value> as / is the password": the end of the clause or a
# connecting word (not "the password hashing algorithm", "the password reset flow")
_NAME_ENDS = r"(?=\s*(?:[.,;:!?)]|$)|\s+(?:for|on|of|to|at|in|and|when|while|if|so|but|then|until|everywhere)\b)"
# "use Kx8... as the password", "admin and Kx8... as the credentials" (the value must look like a password)
_PROSE_AS = re.compile(
    r"(?i)(?<![^\s(])(?P<value>[^\s\"'`(]{4,})\s+as\s+(?:the\s+|your\s+|its\s+|our\s+|their\s+|my\s+)?(?:[\w\-]+\s+){0,2}?"
    r"(?P<name>password|passphrase|passcode|passwd|pwd|pw|pin|credentials?|login)s?" + _NAME_ENDS
)
# "hunter2x is the password for the staging box", "hunter2x is my password" (the value must look like a password)
_PROSE_IS_THE = re.compile(
    r"(?i)(?<![^\s(])(?P<value>[^\s\"'`(]{4,})\s+(?:is|was)\s+(?:the|my|our|your|its|their|his|her)\s+(?:[\w\-]+\s+){0,2}?"
    r"(?P<name>password|passphrase|passcode|passwd|pwd|pw|pin)s?" + _NAME_ENDS
)
# words that hedge the value after "the password is": "is probably X", "is either X or Y"
HEDGES = ("probably", "likely", "maybe", "perhaps", "either", "usually", "still", "now", "currently")
# "my password's hunter2x", "staging password -> hunter2x", "my password, which is hunter2x, works" (the value must
# look like a password)
_PROSE_LINKED = re.compile(
    r"(?i)\b(?P<name>password|passphrase|passcode|passwd|pwd|pin)s?"
    r"(?:'s\s+|\s*(?:->|=>|\u2192)\s*|\s*,\s*(?:which|that)\s+(?:is|was)\s+)"
    rf"(?:(?:{'|'.join(HEDGES)})\s+)*(?P<value>[^\s\"'`<>,]+)"
)
# "<password>hunter2x</password>", "<db:apiKey>...</db:apiKey>": an XML element whose name ends in a secret's name
_XML_SECRET = re.compile(
    r"(?i)<(?P<tag>[\w:.\-]*?(?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|access[_\-]?key|"
    r"private[_\-]?key))(?:\s[^<>]*)?>\s*(?P<value>[^<>\s]+)\s*</(?P=tag)\s*>"
)
# "The Django SECRET_KEY is django-insecure-...", "DB_PASSWORD was Kx8...": a constant named for a secret, then "is"
_CONSTANT_IS = re.compile(
    r"(?<![\w$])(?P<name>(?:[A-Z][A-Z0-9]*_)*(?:SECRET|PASSWORD|PASSWD|PASSPHRASE|PWD|TOKEN|API_?KEY|ACCESS_KEY|"
    r"PRIVATE_KEY|SIGNING_KEY)(?:_[A-Z0-9]+)*)\s+(?:is|was)\s+(?:(?:now|set\s+to)\s+)?(?P<value>[^\s\"'`]+)"
)
# an environment variable's or a constant's name: what holds the secret, not the secret
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
# "Set the cookie secret to 7f3k9Qz2Lm8Xw4Vb", "change the API key to '...'": a secret or token set to a value
_PROSE_SET_SECRET = re.compile(
    r"(?i)\b(?:set|change|changed|reset|update|updated)\s+(?:the\s+|your\s+|my\s+|its\s+|our\s+|their\s+)?"
    r"(?:[\w\-]+\s+){0,3}?(?P<name>secret|token|(?:secret|signing|api|access|private)\s+key)s?\s+(?:to|=)\s+"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,120})(?P=q)|(?P<value>[^\s\"'`]+))"
)
# "the CVV is 123", "CVC: 4821": a payment card's security code
_CARD_CODE = re.compile(
    r"(?i)\b(?:cvv2?|cvc2?|csc|card\s+(?:security|verification)\s+code)\s*(?:(?:is|was)\s+|[:=]\s*|-\s+)"
    r"(?P<value>\d{3,4})(?![\w\-]|[.,]\d)(?!\s+(?:digits?|characters?|chars?|numbers?)\b)"
)
_CARD_CODE_HINT = re.compile(r"(?i)cvv|cvc|csc|card")
# The value of a named code: "<name> [for the office] is|was|:|=|- <value>" or "set the <name> to <value>".
_CODE_VERB = rf"(?:\s(?:{_SET_VERB}|is now|is still|is|was|are|were|reads)\s+|\s*[:=]\s*|\s+-\s+)"


def _named_code(names: str, value: str, direct: bool = False) -> re.Pattern:
    """``<name> [qualifier] <verb> <value>`` or ``set [the] <name> [qualifier] to <value>``; ``direct``: also
    ``<name> <value>`` without a verb (for a value no word can be)."""
    verb = rf"(?:{_CODE_VERB}|\s+)" if direct else _CODE_VERB
    qual = rf"(?:\s+(?:for|of|on|at|to|in)(?:\s+{_QUALIFIER_WORD}){{1,5}}?)?"
    return re.compile(
        rf"(?i)(?:\b(?:set|change|reset|update)\s+(?:the\s+|your\s+|our\s+|its\s+)?(?:{names}){qual}\s+to\s+|"
        rf"\b(?:{names}){qual}{verb})(?P<value>{value})"
    )


# A TOTP / HOTP seed: base32 (RFC 4648), 16+ characters with a digit, named as a one-time-password or 2FA seed,
# secret or key. detect-secrets has no plugin for it. Written contiguous or in groups of four as authenticator apps
# show it ("jbsw y3dp ehpk 3pxp"); the digit keeps prose ("also kept with care", "AUTHENTICATIONKEY") out.
_OTP_NAMES = (
    r"(?:totp|hotp|otp|2fa|mfa|two[- ]factor|2-step|two-step|authenticator)(?:[\s_\-]+(?:app|setup|shared|account|"
    r"device|backup))?[\s_\-]+(?:seed|secret(?:\s+key)?|key|setup key)s?"
)
_BASE32_SEED = r"(?-i:[A-Z2-7]{16,}|[a-z2-7]{16,}|(?:[A-Za-z2-7]{4} ){3,}[A-Za-z2-7]{4})={0,6}(?![\w\-])"
_OTP_SEED = _named_code(_OTP_NAMES, _BASE32_SEED, direct=True)
# A door / alarm / safe / keypad code or combination of 4-8 digits ("the alarm code for the office is 4829", "the
# code for the safe is 12-34-56", "gate code 4821#"); other codes ("error code", "zip code", "status code") are not
# secrets. Without a verb ("gate code 4821#") only the names of a lock's code: a "building code 2018" is a rule book.
_ACCESS = r"(?:alarm|door|gate|safe|lock|locker|padlock|keypad|access|building|garage|entrance|lockbox|key ?box)"
_ACCESS_CODE_NAMES = (
    rf"{_ACCESS}(?:\s+(?:access|entry|keypad|pin))?\s+(?:code|pin|pin code|combination)s?|"
    rf"(?:code|combination)s?\s+(?:for|of|to)\s+(?:the\s+|our\s+|your\s+)?(?:[\w\-]+\s+){{0,2}}?{_ACCESS}s?"
)
_KEYED_CODE_NAMES = (
    r"(?:alarm|door|gate|safe|padlock|locker|keypad|garage|lockbox|key ?box)(?:\s+(?:access|entry|keypad))?\s+"
    r"(?:code|pin|pin code|combination)"
)
# a code as typed on a keypad: 4-8 digits, maybe with "*" / "#" ("4821#", "*1234#"), or a dial's "12-34-56"
_ACCESS_CODE_VALUE = (
    r"(?:[*#]?\d{4,8}#?|\d{1,3}(?:-\d{1,3}){2,4})(?![\w\-#])"
    r"(?!\s+(?:lines?|digits?|characters?|chars?|times?|seconds?|minutes?|hours?|days?|bytes?|rows?|items?)\b)"
)
_ACCESS_CODE = _named_code(_ACCESS_CODE_NAMES, _ACCESS_CODE_VALUE)
_KEYED_CODE = _named_code(_KEYED_CODE_NAMES, _ACCESS_CODE_VALUE, direct=True)
# "the pass is Kx8!mQ2zLp" (a bare "pass" is too common a word for more: "the first pass is slow")
_PROSE_PASS = re.compile(r"(?i)\bpass\s*(?:\s(?:is|was)\s+|[:=]\s*)(?P<value>[^\s\"'`]+)")
# "the admin password, Kx8mQ2zLp, must be ...": an appositive; only a value that cannot be a word or a term
_PROSE_APPOSITIVE = re.compile(
    r"(?i)\b(?:password|passphrase|passcode|passwd|pwd|pw)\s*[,(]\s*(?P<value>[^\s,()\"'`]{8,})\s*[,)]"
)
# "password hunter2" (a topic line, a note): the name directly followed by a value that has digits or symbols
_PROSE_DIRECT = re.compile(r"(?i)\b(?P<name>password|passwd|passphrase|pwd|passcode)\s+(?P<value>[^\s\"'`]{5,})")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
# after "is" / "was set to": a participle ("is emailed by HR", "is posted on the wall") or an infinitive ("was set
# to expire every 90 days") describes the password; a plain word followed by one of these is not the password
# A clause of prose ends at a sentence's end (not the dot of "v2.1" or "1,240.50"), a semicolon or a line break; its
# tokens are what lies between spaces, commas and brackets. Read by the values a secret's clause gives after it
# (``scan``), by the unstable-price check (``write_gate``) and, to a sentence's end, by what is said after a
# description of the password (``detectors``).
CLAUSE_END = re.compile(r"[.!?](?=\s|$)|[;\n]")
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")  # ... and a sentence goes on past a semicolon
CLAUSE_TOKEN = re.compile(r"[^\s,;()\[\]{}<>\"'`]++")
_PARTICIPLE_NEXT = re.compile(
    r"(?i)\s+(?:by|on|in|at|to|from|via|with|into|through|over|under|every|each|once|automatically|manually|"
    r"daily|weekly|monthly|yearly|when|after|before|per|until|only)\b"
)
_IRREGULAR_PARTICIPLES = {"written", "given", "taken", "chosen", "known", "forgotten", "told", "read", "put", "left"}
# ... and what is done to a password or how it is, after "is" / "was", as a support lesson tells it ("my passcode was
# denied", "was stolen, please help", "is fine, the issue is the device"): only when the clause ends or goes on with a
# connecting word (``_DESCRIPTION_END``), so a passphrase that starts with one of them is still read ("broken arrow
# sky blue"); a list, not a rule on word endings: names and words shaped like participles are passwords too
# ("molly", "wicked", "tangled")
_STATE_WORDS = set(
    """
    denied rejected declined refused blocked locked unlocked stolen hacked compromised leaked breached exposed
    phished cracked guessed lost broken changed updated reset expired disabled enabled deactivated activated suspended
    revoked cancelled canceled deleted removed erased wiped rotated synced flagged accepted saved stored remembered
    cached autofilled typed entered mistyped misspelt misspelled reused shared sent emailed texted hidden masked shown
    displayed overwritten rewritten forgotten fine ok okay good bad weird strange unknown outdated temporary insecure
    secure complicated obsolete useless new old default simple easy hard stale fake identical similar numeric
    alphanumeric
    """.split()
)
# ... and the adverbs that may come before one ("was accidentally deleted", "was recently rotated"); a list: names and
# nouns end in -ly too ("lily", "dragonfly", "family")
_STATE_ADVERBS = set(
    """
    accidentally recently automatically successfully wrongly incorrectly correctly mistakenly temporarily permanently
    immediately finally eventually suddenly silently completely partially manually briefly apparently reportedly
    allegedly probably possibly already just also never still
    """.split()
)
# what may follow a state word for it to describe the password: the end of the clause (not ":", which introduces the
# value: "the password is temporary: Welcome1!") or a word that goes on about it
_DESCRIPTION_END = re.compile(
    r"(?i)\s*+(?:$|[\n,.;!?)]|(?:and|but|or|so|because|since|again|twice|yesterday|today|now|already|too|only|"
    r"after|before|when|while|by|on|in|at|to|out|from|via|with|without|for|as|due|along|across|through|into|over|"
    r"under|per|each|once|during|every|until|wrong|right|successfully|correctly|incorrectly|automatically|manually|"
    r"properly|immediately|(?:\d++|two|three|four|five|several|many|a\s++few)\s++times)"
    r"\b)"
)
# ... and, for a passphrase (several words), only what cannot go on a phrase: "the passphrase is lost in translation"
# and "lost and found" are passphrases
_PHRASE_DESCRIPTION_END = re.compile(
    r"(?i)\s*+(?:$|[\n,.;!?)]|(?:because|since|again|twice|yesterday|today|already|when|while)\b)"
)
_INFINITIVES = set(
    """
    expire expires change rotate reset renew lock unlock require include contain match never be use sync follow
    update remain last default auto blank something anything whatever one meet
    """.split()
)


def format_term(value: str) -> bool:
    """An encoding, algorithm or versioned name, alone or with a word: "base64", "sha256-hashed", "Python3-compatible"."""
    if _FORMAT_WORD.match(value):
        return True
    head, _, tail = value.partition("-")
    return (
        bool(tail)
        and bool(_FORMAT_WORD.match(head) or re.fullmatch(r"[A-Za-z]+\d{1,2}", head))
        and bool(re.fullmatch(r"[a-z\-]+", tail))
    )


def looks_like_password(value: str) -> bool:
    """A bare value that cannot be a word: digits and letters, or symbols with letters or digits
    (not a hyphenated word, a version, an encoding or algorithm name, "sha256-hashed")."""
    if len(value) < 5 or _is_placeholder(value) or _VERSION.match(value) or format_term(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    return (has_digit and has_alpha) or (
        has_symbol and (has_digit or has_alpha) and not re.fullmatch(r"[a-z]+(?:[-'][a-z]+)*", value)
    )


def strong_password(value: str) -> bool:
    """A value named only by its place in a sentence ("use <x> as the password", "the password, <x>,"): letters
    and digits, not a name with a version ("SAML2", "OAuth2", "Python3")."""
    return (
        looks_like_password(value)
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and not re.fullmatch(r"[A-Za-z]{1,8}\d{1,2}", value)
        and not re.search(r"-[a-z]{3,}", value)
    )


_CARD = re.compile(r"(?<![\d\-])(?:\d[ \-]?){12,18}\d(?![\d\-])")
_AWS_SECRET_CANDIDATE = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_CONTEXT = re.compile(r"(?i)aws|amazon|\bs3\b|secret.?access|(?:AKIA|ASIA)[0-9A-Z]{16}")

_B64_PLUGIN = Base64HighEntropyString()  # limit 4.5
_HEX_PLUGIN = HexHighEntropyString()  # limit 3.0
# The non-quoted form of detect-secrets' high-entropy regex (see non_quoted_string_regex); we need
# the spans, so we run it ourselves and apply each plugin's entropy limit.
_B64_TOKEN = re.compile(r"(?<![" + re.escape(_B64_PLUGIN.charset) + "])([" + re.escape(_B64_PLUGIN.charset) + "]{20,})")
_HEX_ONLY = re.compile(r"[0-9a-fA-F]+")
_HASH_CONTEXT = re.compile(
    r"(?i)\b(?:commit|commits|sha|sha1|sha-1|sha256|sha-256|sha512|md5|checksum|checksums|digest|hash|hashes|revision|rev|"
    r"fingerprint|etag|object id|oid|blob|tree|tag|build|trace|span|request|correlation|message|order|image|layer|"
    r"cid|ipfs|merge|parent|head|ref|changeset|hg|git)\b[^.\n]{0,24}$"
)
_SECRET_CONTEXT = re.compile(
    r"(?i)\b(?:secret|key|token|password|passphrase|hmac|signing|credential|api|auth|bearer|private)\w*\b[^.\n]{0,24}$"
)


_PUBLIC_KEY_CONTEXT = re.compile(
    r"(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)\s+$|"
    r"-----BEGIN (?:PUBLIC KEY|CERTIFICATE|RSA PUBLIC KEY|PGP PUBLIC KEY BLOCK)-----(?:(?!-----END)[\s\S])*$"
)
_HEX_SPLIT = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")


_URL_START = re.compile(r"(?i)\b(?:https?|ftp|s3|gs)://[^\s/?#]+(?:/[^\s?#]*)?$")


def _in_url_path(t: str, i: int) -> bool:
    """``t[i:]`` starts inside the host or path of a URL (before any ?query or #fragment)."""
    ws = max(t.rfind(" ", 0, i), t.rfind("\n", 0, i), t.rfind("\t", 0, i)) + 1
    return bool(_URL_START.search(t, ws, i))


def _natural_language(s: str) -> bool:
    words = s.split()
    if len(words) < 2:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in s)
    return letters / max(1, len(s)) >= 0.8


# =============================================================================================
# Credentials given on a command line, and "the credentials are user/password" in prose
# =============================================================================================
# detect-secrets has no rule for these: its KeywordDetector reads `name = value`, `name: value` and
# `name := value` only (and BasicAuthDetector `scheme://user:pass@`), never `-p value` or `-u user:pass`,
# and its options (keyword_exclude) only narrow it. So these are the project's own patterns; the value
# checks reuse the rules above (placeholders, detect-secrets' templated/indirect-reference filters).
#
# Each pattern captures one shell word after the flag: quoted ('...' / "...", groups sq / dq) or bare
# (group bare). How strictly the word is read (see ``command_line_value_is_secret``):
#   attached  glued to its flag ("-pXk9...", "--pass=...", "SSHPASS=..."): any literal that is not a placeholder
#   spaced    after a space ("-p Xk9..."): also not a plain word ("the -p flag", "--password option")
#   pair      user + separator + password (curl's "-u user:pass", smbclient's "-U user%pass"), redacted
#             whole as a credentialed URL's user:password is; the password as "attached", not a field name
#   token     "--token ..." / "--api-key ...": a literal that looks random (the key=value rule for tokens)


def _cmd(names: str) -> str:
    """A command word and the rest of its command line up to the flag (not past a pipe, ";", "&&" or a sentence end)."""
    return rf"(?<![\w\-])(?:{names})(?![\w\-])(?:(?!\.\s)[^\n|;&`]){{0,160}}?\s"


_CLI_WORD = r"(?:'(?P<sq>[^'\n]{1,200})'|\"(?P<dq>[^\"\n]{1,200})\"|(?P<bare>[^\s'\"`]+))"
_MYSQL = r"mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlpump|mysqlsh|mariadb(?:-[a-z]+)?"
_SSHPASS_RUNS = r"(?:ssh|scp|sftp|rsync|ssh-copy-id|lftp|git|ansible(?:-playbook)?)"
_LOGIN = r"(?:docker|podman|buildah|skopeo|nerdctl|oras|cf|oc|(?:helm|regctl)\s+registry)\s+login"
_PASSWORD_FLAG = r"--(?:[a-z0-9]+-)*(?:password|passwd|passphrase|pass|pwd)"
_TOKEN_FLAG = (
    r"--(?:[a-z0-9]+-)*(?:token|secret|api-?key|api-token|access-key|secret-key|secret-access-key|auth-token|"
    r"access-token|client-secret|private-token)"
)

# (kind, mode, pair separator, pattern)
_COMMAND_LINE: list[tuple[str, str, str, re.Pattern]] = [
    # curl -u user:pass, --user user:pass, -U / --proxy-user (proxy); httpie -a / --auth user:pass
    (
        "command_line_password",
        "pair",
        ":",
        re.compile(_cmd("curl") + r"(?:-u\s*|-U\s*|--user(?:\s+|=)|--proxy-user(?:\s+|=))" + _CLI_WORD),
    ),
    ("command_line_password", "pair", ":", re.compile(_cmd("http|https|xh") + r"(?:-a\s*|--auth(?:\s+|=))" + _CLI_WORD)),
    # smbclient -U user%pass (Samba tools)
    (
        "command_line_password",
        "pair",
        "%",
        re.compile(_cmd("smbclient|rpcclient|smbcacls|smbget|smbmap") + r"(?:-U\s*|--user(?:\s+|=))" + _CLI_WORD),
    ),
    # mysql -p<password> (glued: "-p secret" would be a prompt and a database name)
    ("command_line_password", "attached", "", re.compile(_cmd(_MYSQL) + r"-p" + _CLI_WORD)),
    # docker / podman / ... login -p <password>, --password <password>
    ("command_line_password", "attached", "", re.compile(_cmd(_LOGIN) + r"(?:-p|--password=)" + _CLI_WORD)),
    ("command_line_password", "spaced", "", re.compile(_cmd(_LOGIN) + r"(?:-p|--password)\s+" + _CLI_WORD)),
    # redis-cli -a <password>, --pass <password>
    ("command_line_password", "spaced", "", re.compile(_cmd("redis-cli") + r"(?:-a|--pass)\s+" + _CLI_WORD)),
    # sshpass -p<password> / -p <password>
    ("command_line_password", "attached", "", re.compile(_cmd("sshpass") + r"-p" + _CLI_WORD)),
    ("command_line_password", "spaced", "", re.compile(_cmd("sshpass") + r"-p\s+" + _CLI_WORD)),
    # ... and a plain word there when what follows is the command sshpass runs, another flag or the end of the line:
    # "sshpass -p secret ssh host" (in prose, "sshpass -p secret only in the lab", a word stays a word)
    (
        "command_line_password",
        "command",
        "",
        re.compile(_cmd("sshpass") + r"-p\s+" + _CLI_WORD + r"(?=\s+(?:-|" + _SSHPASS_RUNS + r"(?![\w\-]))|\s*(?:[`\n]|$))"),
    ),
    # openssl -pass pass:<password>, -passin / -passout pass:<password>
    ("command_line_password", "attached", "", re.compile(r"(?<![\w\-])-pass(?:in|out)?\s+pass:" + _CLI_WORD)),
    # keytool / jarsigner -storepass <password>, -keypass <password>
    (
        "command_line_password",
        "spaced",
        "",
        re.compile(r"(?<![\w\-])-(?:src|dest|new)?(?:store|key)pass\s+" + _CLI_WORD),
    ),
    # the environment variables the clients read their password from
    (
        "command_line_password",
        "attached",
        "",
        re.compile(r"(?<![\w\-])(?:SSHPASS|REDISCLI_AUTH|MYSQL_PWD|PGPASSWORD|PGPASS)=" + _CLI_WORD),
    ),
    # any --password / --pass / --passphrase flag: --password=<x> or --password <x>
    ("command_line_password", "attached", "", re.compile(r"(?<![\w\-])" + _PASSWORD_FLAG + r"=" + _CLI_WORD, re.IGNORECASE)),
    ("command_line_password", "spaced", "", re.compile(r"(?<![\w\-])" + _PASSWORD_FLAG + r"\s+" + _CLI_WORD, re.IGNORECASE)),
    # any --token / --secret / --api-key ... flag
    ("command_line_token", "token", "", re.compile(r"(?<![\w\-])" + _TOKEN_FLAG + r"(?:=|\s+)" + _CLI_WORD, re.IGNORECASE)),
]
# htpasswd -b[c|n|B...] [file] user password (with -n there is no file)
_HTPASSWD = re.compile(r"(?<![\w\-])htpasswd(?P<flags>(?:\s+-[A-Za-z]+)+)\s+(?P<args>[^\n|;&`]{1,300})")
# (a flag's "--" only where its run of name characters starts: from each "-" of a long run of dashes, N^2 steps)
_COMMAND_LINE_HINT = re.compile(
    r"(?i)curl|https?\s|xh\s|smb|rpcclient|mysql|mariadb|login|redis|sshpass|-pass|pass:|storepass|keypass|"
    r"htpasswd|PGPASS|MYSQL_PWD|REDISCLI_AUTH|(?<![\w\-])--[\w\-]*?(?:pass|pwd|token|secret|key)|cred|user"
)
# a word that names the field rather than filling it: "user:password", "name%pass"
_GENERIC_CREDENTIAL_WORDS = {
    "password", "passwd", "pass", "pwd", "pw", "passphrase", "secret", "token", "key", "apikey", "api_key",
    "user", "username", "name", "login", "pin",
}  # fmt: skip
_PASSWORD_NAMES = {"password", "passwd", "pass", "passphrase", "pwd"}  # "sshpass -p password ssh host": a template
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*(?:[-'][a-z]+)*")
_PATH_LIKE = re.compile(r"^(?:~|\.{1,2}/|/)|\.(?:pem|key|json|txt|crt|p12|pfx|jks|env|ya?ml)$", re.IGNORECASE)


def command_line_value_is_secret(mode: str, value: str, quoted: bool = False) -> bool:
    """Whether ``value``, given to a password or token flag (see ``_COMMAND_LINE``), is a literal secret."""
    if not value or value.startswith(("-", "@", "`", "%")) or "$(" in value:
        return False  # the next flag, a file reference, a command substitution, a %VARIABLE%
    if _is_placeholder(value) or value.lower() in _STOPWORDS:
        return False
    if _PATH_LIKE.search(value):
        return False  # a file ("--private-key ~/.ssh/id", "--password /run/secrets/db")
    if mode == "token":
        if re.search(r"=[^=]", value):
            return False  # a spec ("--secret id=npmrc,src=.npmrc")
        return _value_is_secret("token", value, quoted)
    if mode == "command" and not quoted and _PLAIN_WORD.fullmatch(value):
        # the pattern saw a command line around it: a plain word is the password unless it names the field
        return len(value) >= 4 and value.lower() not in _PASSWORD_NAMES | _STOPWORDS
    if mode in ("spaced", "command") and not quoted and (_PLAIN_WORD.fullmatch(value) or value.lower() in _PROSE_NOT_A_SECRET):
        return False  # "the -p flag", "--password option", "-a takes the password"
    if value.lower() in _GENERIC_CREDENTIAL_WORDS:
        return False
    return _value_is_secret("password", value, quoted)


def command_line_pair_is_secret(pair: str, sep: str, quoted: bool = False) -> bool:
    """``user<sep>password`` (curl's -u, smbclient's -U) with a literal password."""
    _user, found, password = pair.partition(sep)
    if not found or not password or _is_placeholder(pair):
        return False
    return command_line_value_is_secret("pair", password, quoted)


# "the credentials are admin/Xk9...", "credentials for the staging db: root:hunter2x", "login is ops / s3cr3t!"
# (``credentials = <x>`` is the key=value rule's)
_PROSE_CREDENTIALS = re.compile(
    r"(?i)\b(?P<name>credentials?|creds|logins?|user(?:name)?\s*(?:and|/|&)\s*password|user/pass)"
    r"(?:\s+(?:for|to|of|on|at)(?:\s+[\w.@\-']+){1,3}?)?"
    r"(?:\s++(?:(?:(?:is|are|was|were|has been|have been|had been)\s+(?:now\s+)?)?(?:set|changed|reset|updated|stored|saved|"
    r"kept)\s+(?:to|as)|is now|are now|is|are|was|were)\s++|\s*+:\s*+|\s++-\s++)"
    r"(?:(?P<user>[\w.@\\\-]++)\s*+(?P<sep>[/:%])\s*+(?P<pair_value>[^\s\"'`]+)|(?P<value>[^\s\"'`]+))"
)
# "log in to staging with admin / Kx8...", "connect as ops with root:hunter2x": a user and password pair after a login
_LOGIN_WITH_PAIR = re.compile(
    r"(?i)\b(?:log(?:s|ged|ging)?\s*(?:in|on)|sign(?:s|ed|ing)?\s*in|login|authenticat\w*|connect\w*)\b[^.\n]{0,60}?"
    r"\b(?:with|using|as)\s+(?P<user>[\w.@\\\-]+)\s*(?P<sep>[/:])\s*(?P<pair_value>[^\s\"'`]+)"
)
# "admin:Kx8... is what the console accepts": a well-known account and its password, bare
_ACCOUNT_PAIR = re.compile(
    r"(?i)(?<![\w/:.@\-])(?P<user>admin|administrator|root|sa|postgres|mysql|guest|user|deploy|ubuntu|ec2-user|"
    r"operator|service|svc[\w\-]*|api|test|demo|elastic|kibana|grafana|jenkins|git|ftp|oracle|system|smtp[\w\-]*)"
    r"\s*:\s*(?P<pair_value>[^\s\"'`]{4,64})"
)
# "the relay login is smtp-user with secret Zq8...", "connect using password Kx8...": a value after "with secret"
_WITH_SECRET = re.compile(
    r"(?i)\b(?:with|using)\s+(?:the\s+|a\s+)?(?:secret|password|passphrase|passwd|pwd)\s+(?P<value>[^\s\"'`]+)"
)
_PAIR_SYMBOL = re.compile(r"[!@#$%^&*+=?~/]")


def bare_pair_is_secret(t: str, user: str, value: str, end: int) -> bool:
    """A password in a bare "user:password" or after "log in with user/": letters, digits and a symbol, not the
    user's own name, not followed by another ":" (a passwd line, a Kubernetes name) and not a number (a port)."""
    if value.lower() == user.lower() or value.isdigit() or t[end : end + 1] == ":" or ":" in value:
        return False
    if re.match(r"\d+/", value):
        return False  # a port and a path: "mongo:27017/app2"
    has_letter, has_digit = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    return (
        has_letter and has_digit and bool(_PAIR_SYMBOL.search(value)) and prose_credential_is_secret(value, pair=True, user=user)
    )


# "user admin pass Kx8...", "username: admin, password: ..." (the password must not read as a word)
_PROSE_USER_PASS = re.compile(
    r"(?i)\b(?:user(?:name)?|login)\s*+[:=]?\s*+(?P<user>\w[\w.@\\\-]*+)(?:\s*+[,;/]\s*+|\s++)(?:and\s++)?"
    r"(?:pass(?:word)?|passwd|pwd|pw)\s*+[:=]?\s*+(?P<value>[^\s\"'`\-][^\s\"'`]*)"
)


def prose_credential_is_secret(value: str, pair: bool, user: str | None = None) -> bool:
    """A password named by "credentials"/"login" in prose. It must not read as a word ("read/write",
    "username/password", "stored"): after "user/" it needs a digit, a symbol or mixed case, alone
    digits and letters."""
    value = value.rstrip(".,;:!?)")
    if len(value) < 4 or value.startswith("/") or _is_placeholder(value) or _VERSION.match(value):
        return False
    if pair and user is not None and user.lower() == value.lower() and value.lower() not in _GENERIC_CREDENTIAL_WORDS:
        return True  # "the default login is admin/admin", "guest/guest": a login that works, however well known
    if format_term(value):
        return False  # "the credentials are stored as base64"
    if _PLAIN_WORD.fullmatch(value) or value.lower() in _GENERIC_CREDENTIAL_WORDS or value.lower().startswith("1password"):
        return False
    if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value):
        return False  # an attribute in code ("creds = self.creds_v2")
    if pair and user is not None and re.sub(r"\d+$", "", user.lower()) == re.sub(r"\d+$", "", value.lower()):
        return False  # "user1/user2", "test1/test2": a naming scheme, not a login
    if not pair and not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False  # one word alone ("the credentials are Vaulted", a type hint) needs digits and letters
    return _value_is_secret("password", value)
