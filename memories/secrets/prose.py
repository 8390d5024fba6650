"""Secret scanning, part 2b: secrets known only by their place in a sentence.

A plain word after a spaced password flag ("redis-cli -a hunter"), a plain word set imperatively ("set the password
to swordfish"), a door code or TOTP seed named by what it opens, 2FA recovery and backup codes, seed / unlock phrases
and bare wallet mnemonics, credentials told as a story ("logs in as admin with hunter2"). detect-secrets has no
plugin for any of them. A plain word is a secret only when it is not a word about the secret (a function word, an
infinitive, a participle, an adverb, a word about the flag) and what follows ends the value (the end of the sentence
or line, punctuation, a connecting word).
"""

import re

from memories.secrets.rules import (
    _ACCESS,
    _BASE32_SEED,
    _GENERIC_CREDENTIAL_WORDS,
    _INFINITIVES,
    _IRREGULAR_PARTICIPLES,
    _MYSQL,
    _PASSWORD_NAMES,
    _PLAIN_WORD,
    _PROSE_NOT_A_SECRET,
    _QUALIFIER_WORD,
    _STOPWORDS,
    _cmd,
    _is_placeholder,
    _named_code,
    format_term,
    strong_password,
)

# Words said about a flag or a password rather than given as one: "the -a flag takes", "--password twice".
_ABOUT_WORDS = set(
    """
    flag flags option options switch switches argument arguments arg args parameter parameters param params value
    values setting settings prompt mode variant alone again twice once first last instead too only either here there
    everywhere anywhere nothing anything something can could will would should must may might does do did has have
    had takes take expects accepts needs requires reads shows leaks exposes prompts asks works fails sets prints
    appears puts ends stays remains keeps gets makes lets means auth authentication login logins access based less
    hash hashes passwords
    """.split()
)
# More verbs that follow "set the password to": an infinitive describes the password, it is not one
_MORE_INFINITIVES = set(
    """
    lapse refresh persist roll cycle regenerate reissue propagate replicate apply comply satisfy conform align coincide
    mirror differ age revert prompt trigger allow block disable enable bypass skip show hide mask display appear work
    fit stay have get need expire rotate reset renew
    """.split()
)
_NOT_A_VALUE = _STOPWORDS | _PROSE_NOT_A_SECRET | _GENERIC_CREDENTIAL_WORDS | _PASSWORD_NAMES | _ABOUT_WORDS
# what ends a value in a sentence: the end, punctuation or a closing backtick, or a connecting word
_SENTENCE_END = r"\s*(?:$|[`\n.,;:!?)])"
_CONNECTOR = r"\s+(?:for|and|then|when|on|at|in|before|after|until|if|while|but|or|so|everywhere)\b"
_VALUE_END = re.compile(_SENTENCE_END + "|" + _CONNECTOR, re.IGNORECASE)
# ... and on a command line also another flag, an argument (host, path, file, "user@host", an upper-case command)
_FLAG_VALUE_END = re.compile(
    _SENTENCE_END
    + r"|\s+-{1,2}[A-Za-z]|\s+(?:\S*[./@:\d]\S*|(?-i:[A-Z]{2,})\b)|"
    + _CONNECTOR
    + r"|\s+(?:to|with|from|into|via|against|every|each|only)\b",
    re.IGNORECASE,
)


def _plain_word_value(value: str, extra: set[str] = frozenset()) -> bool:
    """A plain word that can be a password: not a word about one, not an adverb, participle or gerund."""
    low = value.lower()
    if not _PLAIN_WORD.fullmatch(value) or len(value) < 4 or low in _NOT_A_VALUE or low in extra:
        return False
    return not (low.endswith(("ly", "ing", "ed")) or low in _IRREGULAR_PARTICIPLES or format_term(value))


# --- a plain word after a spaced password flag ----------------------------------------------------------------

# PostgreSQL and MySQL clients read "--password" (and "-p") as "prompt for it": the next word is a database name
_PROMPT_FLAG_TOOLS = re.compile(
    _cmd(
        r"psql|pg_dump|pg_dumpall|pg_restore|pg_basebackup|pgbench|createdb|dropdb|createuser|dropuser|vacuumdb|"
        r"reindexdb|clusterdb|" + _MYSQL
    )
    + r"[^\n|;&`]*$"
)


def flag_word_is_password(t: str, i: int, j: int) -> bool:
    """``t[i:j]``, a plain word after a spaced password flag, is the password: "redis-cli -a hunter -h cache", "use
    redis-cli -a hunter to flush it"; not "the -a flag takes the password", "--password twice", "psql --password db"."""
    if not _plain_word_value(t[i:j]) or not _FLAG_VALUE_END.match(t, j):
        return False
    start = max(t.rfind("\n", 0, i), t.rfind(". ", 0, i), i - 200) + 1  # the command line, as ``_cmd`` reads it
    return not _PROMPT_FLAG_TOOLS.search(t, max(start, 0), i)


# --- "set the password to swordfish", "use hunter2 as the password" --------------------------------------------


def set_word_is_password(t: str, value: str, end: int) -> bool:
    """A plain word after "set the password to": not an infinitive ("to expire", "to persist across reboots") and
    followed by the end of the sentence or a connecting word."""
    extra = _INFINITIVES | _MORE_INFINITIVES
    return _plain_word_value(value, extra) and bool(_VALUE_END.match(t, end))


_NAME_WITH_DIGITS = re.compile(r"(?:[a-z]{3,12}|[A-Z][a-z]{2,11})\d{1,4}")


def as_password(value: str) -> bool:
    """The value of "use <x> as the password": letters and digits, also a word with a number ("hunter2"), not an
    acronym with a version ("FIDO2") or an algorithm ("argon2")."""
    return strong_password(value) or (bool(_NAME_WITH_DIGITS.fullmatch(value)) and not format_term(value))


# --- codes and seeds named by their context -------------------------------------------------------------------

# "the code is 4829 for the front door", "our code is 482913 to get into the building": a bare "code" (an "error
# code", "zip code" or "status code" is not one) whose value is followed by what it opens
_DOOR_CODE = re.compile(
    r"(?i)\b(?:the|our|my|your|its|their)\s+code\s+(?:is|was|:)\s+(?P<value>\d{4,8})(?![\w\-])"
    r"\s+(?:for|to|of|on|at|into)\s+(?:(?:get|come)\s+(?:in|into)\s+|open\s+|unlock\s+|disarm\s+|enter\s+)?"
    rf"(?:the\s+|our\s+|your\s+)?(?:[\w\-]+\s+){{0,2}}?{_ACCESS}s?\b"
)
# "add JBSWY3DPEHPK3PXP to the app", "enter jbsw y3dp ehpk 3pxp into Google Authenticator": a base32 seed put into
# an authenticator
_SEED_INTO_APP = re.compile(
    rf"(?i)\b(?:add|enter|type|paste|put|key|import|load)\s+(?:in\s+)?(?P<value>{_BASE32_SEED})"
    r"\s+(?:in|into|to|on|with)\s+(?:the\s+|your\s+|my\s+|our\s+|a\s+)?(?:[\w\-]+\s+){0,2}?"
    r"(?:apps?|authenticator|authy|phone|yubikey|1password|bitwarden|keepass\w*|otp\s+app)\b"
)

# cheap pre-check, with ``rules._CODES_HINT``: the names and places of these codes
_CODES_MORE_HINT = re.compile(r"(?i)recovery|backup|scratch|emergency|app|phone|authy|yubikey|1password|bitwarden|keepass")

# 2FA recovery / backup codes: "my recovery codes are 8f3k-2j9d, 7h2m-4k8p", "backup code: 1234-5678"; a BitLocker
# recovery key. A code has a digit: 6-12 digits, groups of 3-8 letters or digits, or 8-16 lowercase letters and digits.
_ONE_CODE = r"(?=[A-Za-z\-]*\d)(?:\d{6,12}|[A-Za-z0-9]{3,8}(?:-[A-Za-z0-9]{3,8}){1,7}|(?=[0-9]*[a-z])[a-z0-9]{8,16})(?![\w\-])"
_RECOVERY_NAMES = r"(?:recovery|backup|scratch|emergency|one[- ]time|single[- ]use)\s+(?:codes?|keys?)"
_RECOVERY_CODES = _named_code(_RECOVERY_NAMES, rf"{_ONE_CODE}(?:\s*(?:,|;|\band\b|\bor\b)\s*(?:and\s+)?{_ONE_CODE})*")

# --- seed, recovery, unlock phrases; a bare wallet mnemonic ---------------------------------------------------

_PHRASE = re.compile(
    r"(?i)\b(?P<name>(?:unlock|seed|recovery|wallet|secret|backup|mnemonic)\s+(?:phrase|words)|mnemonic)s?"
    rf"(?:\s+(?:for|of|on|to)(?:\s+{_QUALIFIER_WORD}){{1,4}}?)?"
    r"(?:\s(?:is|was|are|were|reads)\s+|\s*[:=]\s*|\s+-\s+)"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{4,300})(?P=q)|(?P<value>[A-Za-z]+(?: [A-Za-z]+){0,23}))"
)
# Words of a run that cannot be in a wallet mnemonic: function words outside the BIP39 English word list.
_NOT_MNEMONIC = set(
    """
    the and for from with are was were been its our your their his her she them not but does did has had would
    could should may onto than these those which who whom whose while via per here kept using without nor yet
    """.split()
)
_MNEMONIC_WORD = re.compile(r"(?<![\w'\-])[A-Za-z][a-z]{2,7}(?![\w'\-])")


# words that describe a phrase rather than make one
_PHRASE_TALK = set(
    """
    word words letters characters list phrase phrases twelve fifteen eighteen twenty four plain english random
    """.split()
)


def phrase_words_end(t: str, m: re.Match) -> int | None:
    """End of the words of "<seed/unlock phrase> is <words>": two or more words that are not prose about the phrase
    ("is written on paper", "is stored in the vault", "is 24 words long"), or one plain word that ends the sentence."""
    words = []
    for w in re.finditer(r"[A-Za-z]+", m.group("value")):
        low = w.group(0).lower()
        if low in _STOPWORDS or low in _NOT_MNEMONIC:
            break
        words.append(w)
    if not words:
        return None
    first = words[0].group(0)
    if first.lower() in _PROSE_NOT_A_SECRET or format_term(first) or first.lower() in _ABOUT_WORDS:
        return None
    lows = [w.group(0).lower() for w in words]
    if any(w.endswith(("ed", "ly", "ing")) or w in _IRREGULAR_PARTICIPLES or w in _PHRASE_TALK for w in lows):
        return None  # "is written on paper", "are twelve plain words"
    end = m.start("value") + words[-1].end()
    if len(words) == 1 and not set_word_is_password(t, first, end):
        return None
    return end


def mnemonic_runs(t: str):
    """Spans of 12 to 26 lowercase words (the first may be capitalised) of 3-8 letters in a row, none a function word
    outside the BIP39 list: a wallet mnemonic written bare ("restore the wallet with abandon ability able ... on the
    new phone")."""
    run: list[re.Match] = []
    for w in _MNEMONIC_WORD.finditer(t):
        word = w.group(0)
        stop = word.lower() in _NOT_MNEMONIC
        if run and (t[run[-1].end() : w.start()] != " " or stop or not word.islower()):
            yield from _long_run(run)  # only the first word may be capitalised
            run = []
        if not stop:
            run.append(w)
    yield from _long_run(run)


def _long_run(run: list[re.Match]):
    if 12 <= len(run) <= 26:
        yield run[0].start(), run[-1].end()


# --- credentials told as a story ------------------------------------------------------------------------------

# "logs in as admin with hunter2", "log in as root using password swordfish", "signs in as deploy with the password
# Kx8..."; redacted: the password
_LOGIN_STORY = re.compile(
    r"(?i)\b(?:(?:log(?:s|ged|ging)?|sign(?:s|ed|ing)?)\s*(?:in|on)|authenticat(?:e|es|ed|ing)|connect(?:s|ed|ing)?)"
    r"(?:\s*(?:to|into|at|on)\s+(?:the\s+|a\s+)?[\w.\-]+)?\s+as\s+(?:user\s+)?(?P<user>[\w.@\\\-]+)\s+"
    r"(?:with|using|and)\s+(?:(?:the|a|his|her|their|its|my|our|your)\s+)?"
    r"(?P<named>(?:password|passwd|pass|pwd|pw|passphrase)\s+)?(?P<value>[^\s\"'`]+)"
)


def login_story_is_secret(t: str, m: re.Match) -> tuple[int, int] | None:
    """The span of the password in a login story: any literal after "password", else letters and digits ("hunter2",
    not "SSO", "OAuth2", "FIDO2") or the user's own name ("as admin with admin")."""
    value = m.group("value").rstrip(".,;:!?)")
    start = m.start("value")
    span = (start, start + len(value))
    user = m.group("user")
    if _is_placeholder(value) or value.lower() in _NOT_A_VALUE or user.lower() in _STOPWORDS | {"user"}:
        return None
    if value.lower() == user.lower():
        return span  # "logs in as admin with admin"
    if m.group("named"):
        if _PLAIN_WORD.fullmatch(value):
            return span if _plain_word_value(value) and _VALUE_END.match(t, span[1]) else None
        return span if not format_term(value) and not value.startswith(("$", "%", "/", "~", "<")) else None
    return span if as_password(value) else None
