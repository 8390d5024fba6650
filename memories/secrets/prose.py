"""Secret scanning, part 2b: secrets known only by their place in a sentence.

A plain word after a spaced password flag ("redis-cli -a hunter"), a plain word set imperatively ("set the password
to swordfish"), named the password ("swordfish is my password") or used as one ("use password mango for ..."), a door
code or TOTP seed named by what it opens or typed on a keypad, 2FA recovery and backup codes, seed / unlock phrases and bare wallet mnemonics, credentials told as
a story ("logs in as admin with hunter2"), a password given as the answer to a question for it ("Q: wifi password?
A: ..."), a password told in Spanish, French, German, Portuguese or Italian. detect-secrets has no plugin for any of
them. A plain word is a secret only when it is not a word about the secret (a function word, an infinitive, a
participle, an adverb, a word about the flag) and what follows ends the value (the end of the sentence or line,
punctuation, a connecting word).
"""

import re

from memories.secrets.rules import (
    _ACCESS,
    _ACCESS_CODE_VALUE,
    _BASE32_SEED,
    _CODE_VARIABLE,
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
    looks_like_password,
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
    hash hashes passwords everything daily below above
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


_STEM_ZIPF = 2.5  # an English word: "enclose" 2.77, "attach" 3.75; not "dragonf", "butterf" (0), "darl" (2.1)


def _inflected(low: str) -> bool:
    """An -ly / -ing / -ed word made from an English word: an adverb, a gerund or a participle ("quickly", "spelling",
    "attached", "happily", "tried"). "dragonfly", "darling", "lily" only end like one (their stem is no word)."""
    suffix = next((s for s in ("ly", "ing", "ed") if low.endswith(s)), None)
    if suffix is None:
        return False
    stem = low[: -len(suffix)]
    stems = {stem, stem[:-1] + "y"} if stem.endswith("i") else {stem}
    if suffix == "ly":
        stems.add(stem + "le")  # "gently", "simply"
    else:
        stems.add(stem + "e")  # "excited", "enclosed"
        if len(stem) > 1 and stem[-1] == stem[-2]:
            stems.add(stem[:-1])  # "spotted", "running"
    from wordfreq import zipf_frequency  # here: only a plain word with one of those endings needs it

    return any(len(w) >= 3 and zipf_frequency(w, "en") >= _STEM_ZIPF for w in stems)


def _plain_word_value(value: str, extra: set[str] = frozenset()) -> bool:
    """A plain word that can be a password: not a word about one, not an adverb, participle or gerund."""
    low = value.lower()
    if not _PLAIN_WORD.fullmatch(value) or len(value) < 4 or low in _NOT_A_VALUE or low in extra:
        return False
    return not (low in _IRREGULAR_PARTICIPLES or format_term(value) or _inflected(low))


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


# ... or when it was done: "I set the password to tulip yesterday" (an infinitive is still read first: "to expire
# tomorrow")
_WHEN_SET = re.compile(
    r"\s++(?:yesterday|today|tonight|tomorrow|earlier|recently|last\s++(?:night|week|month|year|time)|"
    r"this\s++(?:morning|afternoon|evening|week|month|year))\b",
    re.IGNORECASE,
)


def set_word_is_password(t: str, value: str, end: int) -> bool:
    """A plain word after "set the password to": not an infinitive ("to expire", "to persist across reboots") and
    followed by the end of the sentence, a connecting word or when it was set ("yesterday")."""
    extra = _INFINITIVES | _MORE_INFINITIVES
    return _plain_word_value(value, extra) and bool(_VALUE_END.match(t, end) or _WHEN_SET.match(t, end))


# "swordfish is my password", "Remember that bluebird is the wifi password.": a plain word at the start of a clause
# named the password, then the end of the clause or a connecting word other than "of" ("Biometrics is the password of
# the future"); ``rules._PROSE_IS_THE`` takes a value that looks like a password wherever it stands. Found from the
# name back: ``_WORD_IS_THE`` ends where ``_PASSWORD_NAME`` starts.
_PASSWORD_NAME = re.compile(
    r"(?i)\b(?:password|passphrase|passcode|passwd|pwd|pw)s?"
    r"(?=\s*+(?P<end>[.,;:!?)]|$)|\s++(?P<conn>for|on|to|at|in|and|when|while|if|so|but|then|until|everywhere)\b)"
)
_WORD_IS_THE = re.compile(
    r"(?i)(?:^|[.!?:;,(\n\"'`]|\b(?:that|remember|note|so|and|but|because|guess|think|thought|says?|said|fyi|btw|ok|okay|yes|"
    r"well|reminder)\b)\s*+(?P<value>[A-Za-z][a-z]*+(?:[-'][a-z]+)*+)\s++(?:is|was)\s++(?:(?:also|still|now|probably)\s++)?"
    r"(?P<det>the|my|our|your|its|their|his|her)\s++(?P<qual>(?:[\w\-]++\s++){0,2}?)$"
)
# words that say which thing is the password rather than give it: "this is my password", "mine is the password", "the
# first field is the username, second is the password"
_NOT_THE_VALUE = set(
    """
    here there below above mine yours ours theirs hers nothing everything something anything whatever same other
    another which what this that length entropy first second third fourth fifth last next final former latter previous
    """.split()
)
# "Patience is the password to success", "Trust is the password, and everything else follows": a common word said to
# be "the password" (no "wifi", "db" or "my") is a saying, not a secret, when a purpose follows ("to", "for") or, after
# a comma, more prose; a rare word ("swordfish", "correcthorse") there still is one (Zipf frequency in English)
_SAYING_CONNECTORS = {"to", "for"}
_COMMON_WORD_ZIPF = 3.5
# ... but what a password is for or opens is a thing that has one: a device, a network, an account, a service ("the
# password for the router", "to the guest wifi", "to log into the laptop"; not "the account of success"), or a host
# name ("for db01"). A door or a gate is not one ("the password to open any door" is a saying: a door has a code).
_HAS_A_PASSWORD = (
    r"(?:router|modem|wi-?fi|wlan|network|ssid|hotspot|vpn|laptop|computer|pc|mac|macbook|desktop|workstation|phone|"
    r"iphone|tablet|ipad|server|nas|vm|instance|cluster|host|machine|console|terminal|printer|camera|tv|kiosk|device|"
    r"firewall|account|login|admin|root|profile|e-?mail|mailbox|inbox|portal|dashboard|panel|app|application|site|"
    r"website|database|db|repo|repository|vault|keystore|keychain|wallet|bank|zip|archive|pdf|drive|disk|backup|"
    r"ftp|sftp|ssh|staging|prod|production|sandbox|lab|api|gmail|outlook|netflix|github|gitlab|jira|slack|aws|azure|"
    r"wordpress|jenkins|grafana|kibana)s?"
)
_FOR_A_THING = re.compile(
    r"(?i)\s++(?:(?:get|log|sign)\s++(?:in|into|on|onto)\s++(?:to\s++)?|(?:access|unlock|open|enter|use|reach)\s++)?"
    r"(?:(?:the|my|our|your|a|an|this|that|its|their|his|her)\s++)?"
    rf"(?:(?:[\w\-']++\s++){{0,2}}?{_HAS_A_PASSWORD}\b(?!\s++of\b)|[a-z][a-z_\-]*+\d[\w\-]*+|[a-z][\w\-]*+(?:\.[\w\-]++)++)"
)
# ... and an abstract noun makes a saying whoever's password it is ("Patience is my password to success")
_ABSTRACT_ENDS = ("ness", "ity", "ship", "dom", "hood")
_ABSTRACT_NOUNS = set(
    """
    success happiness life growth freedom love peace wisdom heaven paradise excellence prosperity wealth health joy
    glory victory fortune opportunity opportunities progress power knowledge heart hearts mind minds soul souls future
    greatness kindness trust respect achievement achievements fulfilment fulfillment enlightenment learning change
    world
    """.split()
)
_ABSTRACT_OBJECT = re.compile(
    r"(?i)\s++(?:(?:a|an|the|my|our|your|their|his|her|true|real|lasting|every|any)\s++){0,2}+([a-z]+)\b"
)


def _an_abstract_object(t: str, at: int, *, listed: bool = False) -> bool:
    """What follows a saying's "to" / "for" at ``at`` is an abstract noun: "to success", "for a happy life", "for
    peace of mind" (``listed``: one of ``_ABSTRACT_NOUNS``, not only shaped like one)."""
    m = _ABSTRACT_OBJECT.match(t, at)
    if m is None:
        return False
    head = m.group(1).lower()
    nxt = re.match(r"\s++([a-z]+)\b", t[m.end() : m.end() + 40], re.IGNORECASE)
    if nxt and nxt.group(1).lower() not in _STOPWORDS:
        head = nxt.group(1).lower()  # "a happy life", "the identity provider": the noun after a modifier
    return head in _ABSTRACT_NOUNS or (not listed and head.endswith(_ABSTRACT_ENDS) and len(head) > 6)


def _a_saying(t: str, name: re.Match, m: re.Match) -> bool:
    """``m`` ("<word> is the") and the password ``name`` after it read as a saying (see ``_COMMON_WORD_ZIPF``)."""
    plain = m.group("det").lower() == "the" and not m.group("qual")
    conn = (name.group("conn") or "").lower()
    if conn in _SAYING_CONNECTORS:
        if _FOR_A_THING.match(t, name.end("conn")):
            return False  # "swordfish is the password for the router"
        # "Patience is my password to success"; not "swordfish is my password for the university"
        return plain or (conn == "to" and _an_abstract_object(t, name.end("conn"), listed=True))
    if not plain or name.group("end") != "," or not re.match(r",\s*+[a-z]", t[name.end() :]):
        return False
    from wordfreq import zipf_frequency  # here: only a "<word> is the password, ..." sentence needs it

    return zipf_frequency(m.group("value").lower(), "en") >= _COMMON_WORD_ZIPF


def words_named_the_password(t: str):
    """Spans of the words of "<word> is my password": plain words that can be a password, not ones that point at it
    nor a saying ("Patience is the password to success")."""
    for name in _PASSWORD_NAME.finditer(t):
        m = _WORD_IS_THE.search(t, max(0, name.start() - 80), name.start())
        if m and _plain_word_value(m.group("value"), _NOT_THE_VALUE) and not _a_saying(t, name, m):
            yield m.span("value")


# "use password mango for the guest account", "log in with password mango": a plain word right after "password" as the
# thing to use, when it is not the second half of a term ("use password protection for the PDFs", "use password login
# for admins") and what follows ends the value
_USE_PASSWORD_WORD = re.compile(
    r"(?i)\b(?:use|try|enter|type|with|using)\s++(?:the\s++)?(?:password|passwd|passphrase|passcode)\s++"
    r"(?P<value>[A-Za-z][a-z]*+(?:[-'][a-z]++)*+)(?![\w\-'])"
)
# nouns that make a term with "password" ("password protection", "password grant"): what they name is no password
_PASSWORD_TERMS = set(
    """
    protection rotation generator generators vault vaults store storage strength expiry expiration reuse auth login
    logins grant grants flow flows option options mode modes type types file files list lists database box input
    inputs entry entries meter checker check checks requirement requirements history lockout lockouts attempt attempts
    guess guesses spray leak leaks breach breaches dump dumps sync safe locker keeper book managers account accounts
    user users credential credentials fallback alternative signin logon key keys salt salts pepper crack cracker
    exposure failure failures procedure procedures screens pages forms dialogs boxes prompts hints resets changes
    updates policies rules fields links text string strings value values hash digest authentication encryption
    """.split()
)
_TERM_ENDS = ("tion", "sion", "ment", "ity", "ness", "ance", "ence", "ship", "ics", "ism", "ure")


def used_password_word(t: str, m: re.Match) -> bool:
    """The word of a ``_USE_PASSWORD_WORD`` match is the password: a plain word that is not half of a term with
    "password" ("protection", "login", "rotation") and ends its value ("for the guest account", ".")."""
    value = m.group("value")
    low = value.lower()
    if low in _PASSWORD_TERMS or low.endswith(_TERM_ENDS) or low in _INFINITIVES or low in _MORE_INFINITIVES:
        return False  # "accounts with password expire after 90 days"
    if not _plain_word_value(value, _NOT_THE_VALUE):
        return False
    return bool(_VALUE_END.match(t, m.end("value")))


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

# "enter 4821 on the keypad", "punch in 4821# at the gate", "use 1234 to disarm the alarm": a code typed where it opens
# (cheap pre-check, in the lowercased text: the places)
_KEYPAD_NEEDLES = ("key", "door", "gate", "alarm", "safe", "lock", "garage", "intercom", "buzzer", "entry")
_KEYPADS = r"(?:keypad|key\s?pad|alarm|door|gate|safe|lock|padlock|lockbox|key\s?box|garage|intercom|buzzer|entry\s?phone)s?"
# the place ends its phrase (not "the door prize raffle", "the lock screen"): the end of the clause or a connecting word
_PLACE_ENDS = (
    r"(?=\s*+(?:$|[.,;:!?)\n])|\s++(?:and|or|to|for|before|after|when|while|then|so|but|if|until|with|of|on|at|in|"
    r"by|from|outside|inside|downstairs|upstairs|again|once|twice)\b)"
)
_CODE_ENTERED = re.compile(
    r"(?i)\b(?:enter|type|punch|key|press|dial|input|use|tap)\s+(?:in\s+)?(?:the\s+)?(?:code\s+|pin\s+)?"
    rf"(?P<value>{_ACCESS_CODE_VALUE})\s+(?:on|into|at|in|to|for)\s+(?:(?:open|unlock|disarm|arm|get\s+into|enter)\s+)?"
    rf"(?:the\s+|a\s+|our\s+|your\s+|my\s+)?(?:[\w\-]+\s+){{0,2}}?{_KEYPADS}\b{_PLACE_ENDS}"
)
# "at the keypad, enter 4821", "on the gate's keypad type 4821#"
_KEYPAD_THEN_CODE = re.compile(
    r"(?i)\b(?:keypad|key\s?pad|intercom|buzzer)\b[^.\n]{0,30}?\b(?:enter|type|punch\s+in|key\s+in|press|dial|tap)\s+"
    rf"(?P<value>{_ACCESS_CODE_VALUE})"
)
# "use PIN 4821", "PIN 4821 for the card", "my pin 4821": a PIN given after its name, without a verb. A lower-case
# "pin" only after a determiner or possessive: "pin 1234 of the header", "Pin 2048 to the dashboard" are other pins.
_PIN_GIVEN = re.compile(
    r"(?i)(?<!gpio )(?<!header )\b(?:(?-i:PIN)|(?:my|the|your|our|his|her|their|its|card|bank|sim)\s++pin|passcode)"
    r"(?:\s++(?:code|number))?\s*+(?:#|no\.)?\s*+"
    r"(?P<value>\d{4,8})(?![\w\-]|[.,]\d)(?!\s+(?:times?|digits?|characters?|chars?|bytes?|pins?)\b)"
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


# --- a password asked for and answered in one lesson ----------------------------------------------------------

# what a question asks for: a password, passcode, passphrase, PIN or wifi key (``plain``: a word can be one), or a code,
# key or combination (``code``: only a value no word can be)
_ASKED_SECRET = (
    r"(?P<plain>pass(?:word|phrase|code)|passwd|pwd|pin(?:\s+code)?|wi-?fi\s+key|network\s+key)s?|"
    r"(?P<code>code|key|combination)s?"
)
# "what's the", "tell me the", "User asked for the": a question for the value (a "how do I change ..." is about it)
_ASKS = (
    r"(?P<ask>\b(?:what(?:'s|\s+is|\s+was|\s+are)|which\s+is|tell\s+me|give\s+me|remind\s+me|send\s+me|share|"
    r"(?:asked|asks|asking|requested|requests)(?:\s+(?:me\s+)?for)?)\b[^?.!\n]{0,60}?)"
)
# a question that is only the thing asked for: "wifi password?", "Q: the door code?" (not "how to change password?")
_NAMES_ONLY = (
    r"(?:^|(?<=[\n.!?:]))\s*+(?:(?!(?:how|why|when|where|who|whom|should|shall|can|could|do|does|did|is|are|was|were|"
    r"will|would|has|have|must|may|any|forgot|forgotten|reset|change|changing|update|rotate|set)\b)[\w\-']++\s++){0,3}?"
)
_ANSWER_MARK = r"(?:(?-i:\bA)\s*[:)]|\bAns(?:wer)?\s*[:\-]|\b(?:Reply|Response|Assistant|Agent|Bot)\s*:|->|=>|\u2192)"
_ANSWERED = re.compile(
    rf"(?i)(?:{_ASKS}|{_NAMES_ONLY})\b(?:{_ASKED_SECRET})\b(?:\s++(?:for|of|to|on|at|in)\s++[^?.!\n]{{1,40}}?)?"
    rf"\s*+(?P<mark>\?)?[?.]*+\s*+{_ANSWER_MARK}\s*+(?:(?:it's|it\s++is|that's|use|try|just)\s++)?"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{4,64})(?P=q)|(?P<value>[^\s\"'`,;()]+))"
)
# cheap pre-check (in the lowercased text): an answer marker, and a secret asked for
_ANSWER_NEEDLES = ("->", "=>", "\u2192", "a:", "a)", "answer", "ans:", "reply", "response", "assistant", "agent", "bot:")
_ASKED_NEEDLES = ("pass", "pwd", "pin", "key", "code", "combination")
# what may stand before a "code" or "key" asked for (not an "error code", a "zip code", a "sort key")
_CODE_OWNERS = set(
    """
    door alarm gate safe lock locker garage entry access building keypad wifi wi-fi network security unlock api secret
    license the my our your its their
    """.split()
)
# answers that give no value or say what it is like: "A: unknown", "A: 1Password", "A: confidential"
_NO_ANSWER = set(
    """
    none unknown unset empty blank nothing same default different yes nope sure vault 1password bitwarden lastpass
    keepass keychain sso ldap oauth saml kerberos okta unchanged long short weak strong fine good wrong right correct
    incorrect valid invalid private public confidential classified sensitive simple complex easy hard random unique
    personal shared current temporary permanent mandatory optional free open closed gone down there here below above
    attached online offline lowercase uppercase numeric alphanumeric new old this that mine yours ours theirs
    """.split()
)
_EMAIL = re.compile(r"[\w.+\-]+@[\w\-]+\.[\w.\-]+")


def answered_value(t: str, m: re.Match) -> tuple[int, int] | None:
    """The span of the value an ``_ANSWERED`` answer gives: quoted, a PIN or keypad code, a value that cannot be a word
    (for a code or key: letters and digits), or, when a password was asked for, a plain word that ends the answer ("A:
    swordfish.")."""
    if m.group("ask") is None and m.group("mark") is None:
        return None  # "wifi password -> ..." without a question is ``rules._PROSE_LINKED``'s
    if m.group("code") is not None:
        owner = re.search(r"([\w\-]+)\s+$", t[max(0, m.start("code") - 30) : m.start("code")])
        if owner is None or owner.group(1).lower() not in _CODE_OWNERS:
            return None
    if m.group("quoted") is not None:
        return None if _is_placeholder(m.group("quoted")) else m.span("quoted")
    value = m.group("value").rstrip(".,;:!?")
    span = (m.start("value"), m.start("value") + len(value))
    if _is_placeholder(value) or value.startswith(("$", "%", "/", "~", "<", "@")) or "://" in value or _EMAIL.fullmatch(value):
        return None
    if re.fullmatch(r"[*#]?\d{4,8}#?|\d{1,3}(?:-\d{1,3}){2,4}", value):
        return span
    if m.group("code") is not None:
        return span if strong_password(value) else None  # a key: letters and digits, not "created_at"
    if looks_like_password(value):
        return span
    if m.group("plain") is not None and _plain_word_value(value, _NO_ANSWER) and _VALUE_END.match(t, span[1]):
        return span
    return None


# --- a password told in another language ----------------------------------------------------------------------

# "mi contraseña es X", "la clave es X", "el pin es 1234" (es), "mon mot de passe est X" (fr), "mein Passwort ist X",
# "das WLAN-Passwort lautet X" (de; ``compound``: also inside a word), "minha senha é X" (pt), "la mia password è X" (it)
_FOREIGN_NAMES = (
    r"contrase[ñn]as?|claves?|chaves?|senhas?|palavras?[\s\-]passe|mots?\s+de\s+passe|mdp|codes?\s+pin|"
    r"c[óo]digos?\s+pin|parola\s+d'ordine|passwords?|pin"
)
_FOREIGN_PASSWORD = re.compile(
    rf"(?i)(?:(?<![\w\-])(?P<name>{_FOREIGN_NAMES})|(?P<compound>passw[öo]rter|passwort|kennw[öo]rter|kennwort))"
    r"(?:\s++[\w'\-]++){0,4}?"
    r"(?:\s++(?P<verb>es|era|est|[ée]tait|ist|lautet|war|[ée]|è)(?:\s*+:\s++|\s++)|\s*+:\s*+)"
    r"(?:(?P<q>[\"'`«»])\s*(?P<quoted>[^\"'`«»\n]{4,64}?)\s*[\"'`«»]|(?P<value>[^\s\"'`«»]+))"
)
# cheap pre-check (in the lowercased text): the names, or an English one and a verb of those languages
_FOREIGN_NEEDLES = ("contrase", "clave", "chave", "senha", "palavra", "de passe", "mdp", "passwort", "passwört", "kennw")
_FOREIGN_VERB_NEEDLES = (" es ", " e ", " é ", " è ", " est ", " ist ", " lautet ")
_FOREIGN_WORD = re.compile(r"[^\W\d_]+(?:[-'][^\W\d_]+)*")
# words that follow "my password is" in those languages and are not a password: function words, adjectives, auxiliaries
_FOREIGN_NOT_A_VALUE = set(
    """
    el la los las lo un una unos unas de del en con para por que y o no es muy se su sus mi mis tu tus al como
    obligatoria obligatorio necesaria necesario incorrecta incorrecto correcta correcto segura seguro débil debil fuerte
    larga largo corta corto válida valida válido valido inválida invalida secreta secreto nueva nuevo vieja viejo igual
    distinta distinto diferente misma mismo sensible única unica único unico personal temporal privada privado
    importante fundamental esencial simple compleja complejo fácil facil difícil dificil vacía vacia más mas menos
    demasiado también tambien siempre nunca ahora todavía todavia aquí aqui tuya tuyo suya suyo mía mia mío nuestra
    le les une des du dans avec pour par et ou ne pas plus ce cette mon ma mes ton ta son sa au aux est était etait
    requis obligatoire faux fausse vide identique fort forte faible valide invalide nécessaire necessaire différent
    different secrète secrete nouveau nouvelle ancien ancienne temporaire trop très tres toujours encore ici expire
    mienne tienne sienne
    der die das den dem des ein eine einen einem und oder nicht sehr im in mit für fur von zu noch immer auch nur mein
    meine dein deine ist war falsch richtig korrekt geheim sicher unsicher leer neu alt gleich anders erforderlich
    notwendig nötig notig pflicht ungültig ungultig gültig gultig vergessen lang kurz stark schwach hier dort jetzt
    mindestens höchstens hochstens genau meins deins
    o a os as um uma do da dos das em com por e ou não nao é muito meu minha seu sua teu tua obrigatória obrigatoria
    obrigatório obrigatorio necessária necessaria incorreta incorreto correta correto fraca fraco forte longa longo
    curta curto inválida nova novo antiga antigo mesma mesmo sensível sensivel pessoal temporária temporaria simples
    complexa vazia ainda sempre agora aqui dele dela nossa
    il gli i uno di della è non molto più piu mio mia tuo tua obbligatoria necessaria errata sbagliata corretta sicura
    debole lunga valida segreta vecchia uguale diversa stessa stesso troppo unica personale temporanea privata
    semplice vuota anche ancora qui stata stato sono scaduta scaduto
    cualquier cualquiera alguna alguno ninguna ninguno cada otra otro esta este esa ese aquella aquel toda todo
    quelconque celle celui cela ceci autre chaque beliebig beliebige irgendein irgendeine diese dieses jede jedes
    andere qualquer essa esse outra outro cada toda qualsiasi qualunque questa quella altra ogni
    """.split()
)
# participles and gerunds ("cambiada", "expiré", "requise", "geändert", "zurückgesetzt", "usando", "cambiata",
# "richiesta"): they describe the password. Each language its own endings (an Italian "-ata" is a Spanish word).
_FOREIGN_INFLECTED = {
    "es": re.compile(r"(?i)(?:[ai]d[oa]s?|ando|[ie]endo)$"),
    "pt": re.compile(r"(?i)(?:[ai]d[oa]s?|ando|[ei]ndo)$"),
    "fr": re.compile(r"(?i)(?:ée?s?|ises?|ites?|ues?)$"),
    "de": re.compile(r"(?i)^(?:ab|an|auf|aus|zurück|ein|um|vor|zu)?ge\w{2,}(?:t|en)$"),
    "it": re.compile(r"(?i)(?:[aiu]t[oaie]|iest[oaie]|ost[oaie]|tt[oaie]|ando|endo)$"),
}
# the language of a name, or of the verb after a name every language uses ("password", "pin")
_NAME_LANGUAGE = (
    ("contrase", "es"), ("clave", "es"), ("código", "es"), ("codigo", "es"), ("senha", "pt"), ("chave", "pt"),
    ("palavra", "pt"), ("mot", "fr"), ("mdp", "fr"), ("code", "fr"), ("parola", "it"), ("passw", "de"),
    ("kennw", "de"),
)  # fmt: skip
_VERB_LANGUAGE = {
    "es": "es", "era": "es", "est": "fr", "était": "fr", "etait": "fr", "ist": "de", "lautet": "de", "war": "de",
    "é": "pt", "e": "pt", "è": "it",
}  # fmt: skip


def _language(name: str, verb: str) -> str | None:
    """The language a ``_FOREIGN_PASSWORD`` match is in: by its name, else ("password", "pin") by its verb."""
    if name.startswith(("password", "pin")):
        return _VERB_LANGUAGE.get(verb)
    return next((lang for prefix, lang in _NAME_LANGUAGE if name.startswith(prefix)), None)


# a word that is also a key to something ("la clave es la paciencia"): the password when the language seldom uses the
# word, when it is someone's or a device's key ("mi clave es perro", "la clave del wifi es perro"), or when a bare "la
# clave es" ends the sentence on a noun that is not what success has a key in ("la clave es mariposa.")
_AMBIGUOUS_NAMES = {"clave": "es", "claves": "es", "chave": "pt", "chaves": "pt"}
_OWNED_KEY = re.compile(r"(?i)\b(?:mi|tu|su|nuestra|vuestra|minha|tua|sua|nossa)\s++$")
_KEY_OF_A_THING = re.compile(
    r"(?i)\b(?:wi-?fi|wlan|red|rede|router|roteador|m[óo]dem|cuenta|conta|correo|e-?mail|port[áa]til|ordenador|"
    r"computadora|computador|celular|m[óo]vil|tel[ée]fono|telefone|banco|app|servidor|cajero|tarjeta|cart[ãa]o)\b"
)
# what a key to something is: an abstract noun, an infinitive ("la clave es paciencia", "a chave é escutar")
_ABSTRACT_FOREIGN_ENDS = (
    "ción", "cion", "sión", "sion", "ção", "cao", "são", "sao", "cia", "dad", "tad", "tud", "dade", "ismo", "eza",
    "anza", "ança", "anca", "miento", "mento", "ía", "ar", "er", "ir",
)  # fmt: skip
_ABSTRACT_FOREIGN = set(
    """
    disciplina trabajo trabalho amor respeto respeito calma tiempo tempo equilibrio equilíbrio práctica practica
    prática pratica esfuerzo esforço esforco foco enfoque dinero dinheiro fe fé pasión pasion paixão paixao hábito
    habito hábitos habitos rutina rotina salud saúde saude descanso sueño sueno sono estrategia estratégia ritmo orden
    ordem contexto timing balance humor sorte suerte escucha escuta diálogo dialogo actitud atitude empeño foco
    """.split()
)
# a bare "la clave es ..." before an adjective: "es sencilla", "é fundamental" (an -o / -a word is one when its other
# gender is a word too: "sencilla" / "sencillo", not "mariposa")
_ADJECTIVE_ENDS = ("al", "ble", "ante", "ente", "az", "ivo", "iva", "ico", "ica", "il", "oso", "osos")
_WORD_ENDS_SENTENCE = re.compile(r"\s*+(?:$|[\n.,;:!?)])")


def _key_is_password(t: str, m: re.Match, name: str, value: str) -> bool:
    """A plain ``value`` after "la clave es" / "a chave é" is the password, not what a key to something is."""
    low, lang = value.lower(), _AMBIGUOUS_NAMES[name]
    from wordfreq import zipf_frequency  # here: only a "clave" / "chave" sentence needs it

    owned = bool(
        _OWNED_KEY.search(t, max(0, m.start() - 12), m.start()) or _KEY_OF_A_THING.search(t, m.end("name"), m.start("value"))
    )
    rare = zipf_frequency(low, lang) < 3.5
    if owned and rare:
        return True  # someone's or a device's key, a word the language seldom uses ("mi clave es jaguar")
    if low in _ABSTRACT_FOREIGN or low.endswith(_ABSTRACT_FOREIGN_ENDS):
        return False  # what a key to something is ("la clave es escalabilidad")
    if rare or owned:
        return True
    if value[0].isupper() or low.endswith(_ADJECTIVE_ENDS) or not _WORD_ENDS_SENTENCE.match(t, m.start("value") + len(value)):
        return False
    other = low[:-1] + {"o": "a", "a": "o"}[low[-1]] if low[-1] in "oa" else ""
    return not other or zipf_frequency(other, lang) < 3.0


# "a senha e abacaxi" (an "é" typed without its accent) or "a senha e usuário" ("and"): "is" only before the end of
# the sentence, and not before what is asked for with a password or the next step of a form ("a senha e confirme.")
_WITH_A_PASSWORD = set(
    """
    usuário usuario utilizador login logins email e-mail nome conta código codigo token pin confirmação confirmacao
    username user cpf telefone número numero endereço endereco matrícula matricula identificador certificado
    assinatura perfil cartão cartao dados senha senhas chave chaves confirme confirma digite digita clique clica tente
    tenta aguarde aguarda entre entra continue continua salve salva envie envia pressione selecione escolha faça faca
    acesse acessa insira informe preencha repita guarde anote verifique mude troque altere pronto pronta feito fim
    prossiga volte avance siga toque aperte tecle conclua finalize reinicie recomece
    """.split()
)


def _e_is_is(t: str, low: str, end: int) -> bool:
    """The unaccented "e" before ``low`` (ending at ``end``) reads as "é": the word ends the sentence and is not one
    said with a password or a form's next step, nor an infinitive ("e confirmar")."""
    if low in _WITH_A_PASSWORD or low.endswith(("ar", "er", "ir")):
        return False
    return bool(_WORD_ENDS_SENTENCE.match(t, end))


def foreign_value_span(t: str, m: re.Match) -> tuple[int, int] | None:
    """The span of the password a ``_FOREIGN_PASSWORD`` match gives: quoted, digits (a PIN: 4-8), a value that cannot
    be a word, or a plain word that is not a function word, an adjective or a participle of that language."""
    name, verb = (m.group("name") or m.group("compound")).lower(), (m.group("verb") or ":").lower()
    pin = name.endswith("pin")
    if verb == ":" and name in ("password", "passwords", "pin", *_AMBIGUOUS_NAMES):
        return None  # the English rules'; "clave: valor" in a table of keys
    if m.group("quoted") is not None:
        value = m.group("quoted")
        return None if _is_placeholder(value) or (pin and not value.isdigit()) else m.span("quoted")
    value = m.group("value").rstrip(".,;:!?)")
    span = (m.start("value"), m.start("value") + len(value))
    if _is_placeholder(value) or value.startswith(("$", "%", "/", "~", "<", "@")) or "://" in value:
        return None
    if value.isdigit():
        return span if 4 <= len(value) <= (8 if pin else 16) else None
    if pin:
        return None
    if name in _AMBIGUOUS_NAMES and _CODE_VARIABLE.fullmatch(value):
        return None  # "la clave es user_id": a key in code
    if looks_like_password(value):
        return span
    low = value.lower()
    if len(value) < 4 or not _FOREIGN_WORD.fullmatch(value):
        return None
    if verb == "e" and not _e_is_is(t, low, m.start("value") + len(value)):
        return None  # "a senha e o usuário": an unaccented "e" is also "and"
    lang = _language(name, verb)
    inflected = _FOREIGN_INFLECTED.values() if lang is None else (_FOREIGN_INFLECTED[lang],)
    if low in _FOREIGN_NOT_A_VALUE or low in _NOT_A_VALUE or any(rx.search(low) for rx in inflected):
        return None
    if name in _AMBIGUOUS_NAMES:
        return span if _key_is_password(t, m, name, value) else None
    return span
