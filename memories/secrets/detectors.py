"""Secret scanning, part 3: decoding and the detectors that run over the views."""

import base64
import binascii
import re

from detect_secrets.filters import heuristic as ds_heuristic

from memories.secrets.prose import (
    _ANSWER_NEEDLES,
    _ANSWERED,
    _ASKED_NEEDLES,
    _CODE_ENTERED,
    _CODES_MORE_HINT,
    _DOOR_CODE,
    _FOREIGN_NEEDLES,
    _FOREIGN_PASSWORD,
    _FOREIGN_VERB_NEEDLES,
    _KEYPAD_NEEDLES,
    _KEYPAD_THEN_CODE,
    _LOGIN_STORY,
    _PHRASE,
    _PIN_GIVEN,
    _RECOVERY_CODES,
    _SEED_INTO_APP,
    _USE_PASSWORD_WORD,
    answered_value,
    as_password,
    flag_word_is_password,
    foreign_value_span,
    login_story_is_secret,
    mnemonic_runs,
    phrase_words_end,
    set_word_is_password,
    used_password_word,
    words_named_the_password,
)
from memories.secrets.rules import (
    _ACCESS_CODE,
    _ACCOUNT_PAIR,
    _ARTIFACTORY,
    _AWS_CONTEXT,
    _AWS_SECRET_CANDIDATE,
    _B64_PLUGIN,
    _B64_TOKEN,
    _CARD,
    _CARD_CODE,
    _CARD_CODE_HINT,
    _CODES_HINT,
    _COMMAND_LINE,
    _COMMAND_LINE_HINT,
    _CONNECTION,
    _CONNECTION_HINT,
    _CONSTANT_IS,
    _CONSTANT_NAME,
    _DESCRIPTION_END,
    _DIGITS_HINT,
    _DS_CONTEXT,
    _DS_KEYWORD,
    _HASH_CONTEXT,
    _HEX_ONLY,
    _HEX_PLUGIN,
    _HEX_SPLIT,
    _HTPASSWD,
    _INFINITIVES,
    _IRREGULAR_PARTICIPLES,
    _KEY_VALUE,
    _KEYED_CODE,
    _KEYWORD_HINT,
    _KV_HINT,
    _LOGIN_WITH_PAIR,
    _OTP_SEED,
    _PARTICIPLE_NEXT,
    _PATH_LIKE,
    _PHRASE_DESCRIPTION_END,
    _PRIVATE_KEY_BLOCK_END,
    _PRIVATE_KEY_HEADERS,
    _PROSE_APPOSITIVE,
    _PROSE_AS,
    _PROSE_CREDENTIALS,
    _PROSE_DIRECT,
    _PROSE_HINT,
    _PROSE_IS_THE,
    _PROSE_LINKED,
    _PROSE_NOT_A_SECRET,
    _PROSE_PASS,
    _PROSE_PASSWORD,
    _PROSE_SET,
    _PROSE_SET_SECRET,
    _PROSE_USER_PASS,
    _PUBLIC_KEY_CONTEXT,
    _QUALIFIER_SHORT,
    _QUOTE_CHARS,
    _SECRET_CONTEXT,
    _STATE_ADVERBS,
    _STATE_WORDS,
    _STOPWORDS,
    _STRUCTURED,
    _WITH_SECRET,
    _WORD,
    _XML_SECRET,
    CLAUSE_TOKEN,
    HEDGES,
    SENTENCE_END,
    _in_url_path,
    _is_placeholder,
    _natural_language,
    _Rx,
    _value_is_secret,
    bare_pair_is_secret,
    command_line_pair_is_secret,
    command_line_value_is_secret,
    format_term,
    is_code_reference,
    looks_like_password,
    luhn_valid,
    prose_credential_is_secret,
    strong_password,
)
from memories.secrets.views import View

# --- decoding -----------------------------------------------------------------------------------

_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{16,}={0,3}")
_HEX_RUN = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Fa-f])")


def _printable(b: bytes) -> str | None:
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not s or sum(c.isprintable() or c in "\n\t" for c in s) / len(s) < 0.95:
        return None
    return s


def decode_b64(token: str) -> str | None:
    """Decode a (standard or URL-safe, padded or not) base64 token to printable text, else None."""
    core = token.rstrip("=")
    if len(core) % 4 == 1:
        return None
    padded = core + "=" * (-len(core) % 4)
    for altchars in (None, b"-_"):
        try:
            raw = (
                base64.b64decode(padded, altchars=altchars, validate=True)
                if altchars is None
                else base64.urlsafe_b64decode(padded)
            )
        except (binascii.Error, ValueError):
            continue
        s = _printable(raw)
        if s is not None:
            return s
    return None


def decode_hex(token: str) -> str | None:
    try:
        return _printable(bytes.fromhex(token))
    except ValueError:
        return None


# =============================================================================================
# Scanning
# =============================================================================================

_Hit = tuple[str, int, int, str]  # kind, original start, original end, via


def _chunk_ok(view: View, i: int, j: int) -> bool:
    """In collapsed/reversed views a match must start and end on chunk boundaries."""
    return view.is_boundary(i) and view.is_boundary(j)


def _cut_at_stopword(view: View, rx: _Rx, i: int, j: int) -> int:
    """Shorten a glued match before the first function word that follows a complete token."""
    if view.gap_before is None:
        return j
    t = view.text
    for g in range(i + 1, j):
        if not view.gap_before[g]:
            continue
        m = _WORD.match(t, g)
        word_here = False
        if m:
            # the chunk starting at g, as it was before collapsing: up to the next gap
            end = g + 1
            while end < len(t) and not view.gap_before[end] and t[end].isalpha():
                end += 1
            word = t[g:end].lower()
            if word in _STOPWORDS or (word[::-1] in _STOPWORDS and view.name.startswith("reversed")):
                word_here = True
        if word_here and rx.pattern.fullmatch(t, i, g):
            return g
    return j


def _structured(view: View, hits: list[_Hit], collapsed_view: bool) -> None:
    t = view.text
    for rx in _STRUCTURED:
        if collapsed_view and not rx.collapsible:
            continue
        if rx.needles and not any(n in t for n in rx.needles):
            continue
        for m in rx.pattern.finditer(t):
            i, j = m.span(rx.group)
            if i < 0:
                continue
            if collapsed_view:
                j = _cut_at_stopword(view, rx, i, j)
                if not _chunk_ok(view, i, j):
                    continue
            value = t[i:j]
            if rx.validate is not None and not rx.validate(value):
                continue
            if ds_heuristic.is_sequential_string(value):
                continue
            s, e = view.orig_span(i, j)
            hits.append((rx.kind, s, e, view.name))


def _private_keys(view: View, hits: list[_Hit]) -> None:
    t = view.text
    for rx in _PRIVATE_KEY_HEADERS:
        for m in rx.finditer(t):
            # the block: from the "-----BEGIN" line to the matching END marker, else to the end of the text
            start = t.rfind("-----", 0, m.start())
            start = start if start >= 0 and m.start() - start <= 6 else m.start()
            end_m = _PRIVATE_KEY_BLOCK_END.search(t, m.end())
            end = end_m.end() if end_m else len(t)
            s, e = view.orig_span(start, end)
            hits.append(("private_key", s, e, view.name))


def _context(view: View, hits: list[_Hit]) -> None:
    """detect-secrets context plugins + the project's checks, on the canonical view."""
    t = view.text

    def add(kind: str, i: int, j: int) -> None:
        s, e = view.orig_span(i, j)
        hits.append((kind, s, e, view.name))

    tl = t.lower()
    for rx in _DS_CONTEXT:
        if rx.needles and not any(n in tl for n in rx.needles):
            continue
        for m in rx.pattern.finditer(t):
            i, j = m.span(rx.group)
            if i >= 0 and not _is_placeholder(t[i:j]):
                add(rx.kind, i, j)
    for rx in _ARTIFACTORY if ("AKC" in t or "AP" in t) else ():
        for m in rx.finditer(t):
            i, j = m.span()
            while i < j and t[i] in ' \t=:"':
                i += 1
            while j > i and t[j - 1] in ' \t"\n':
                j -= 1
            if any(c.isdigit() for c in t[i:j]) and any(c.islower() for c in t[i:j]):
                add("artifactory_token", i, j)

    # detect-secrets KeywordDetector regexes, value trimmed to one token unless quoted
    for rx, group in _DS_KEYWORD if _KEYWORD_HINT.search(t) else ():
        for m in rx.finditer(t):
            i, j = m.span(group)
            if i < 0:
                continue
            quoted = i > 0 and t[i - 1] in _QUOTE_CHARS
            if not quoted:
                k = i
                while k < j and not t[k].isspace():
                    k += 1
                j = k
            value = t[i:j].rstrip(".,;:!?)")
            j = i + len(value)
            if value and _value_is_secret(m.group(1) or "secret", value, quoted, t, i):
                add("credential_assignment", i, j)

    for m in _KEY_VALUE.finditer(t) if _KV_HINT.search(t) else ():
        value = m.group("value").rstrip(".,;:!?)")
        if _value_is_secret(m.group("name"), value, bool(m.group("q")), t, m.start("value")):
            add("credential_assignment", m.start("value"), m.start("value") + len(value))

    for kind, rx in _CONNECTION if _CONNECTION_HINT.search(t) else ():
        for m in rx.finditer(t):
            value = m.group("value")
            if kind != "credentialed_url":  # a URL password ends at "@"; elsewhere drop sentence punctuation
                value = value.rstrip(".,;:!?)")
            if _is_placeholder(value) or (kind == "bearer_token" and not _value_is_secret("token", value)):
                continue
            if kind == "connection_string_secret" and m.group(0).lower().startswith("sig") and len(value) < 16:
                continue
            if kind == "connection_string_secret" and (
                is_code_reference(t[m.start() : m.start("value")], value, t, m.start("value")) or re.match(r"[\w.]+\(", value)
            ):
                continue  # code: "password = getpass.getpass()", "self.password = make_password(raw)"
            if kind == "credentialed_url":
                add(kind, m.start("user"), m.start("value") + len(value))  # user:password
            else:
                add(kind, m.start("value"), m.start("value") + len(value))

    if _PROSE_HINT.search(t):
        _prose(view, add)
    if _COMMAND_LINE_HINT.search(t):
        _command_line(t, add)
    if _CODES_HINT.search(t) or _CODES_MORE_HINT.search(t):
        _codes(t, add)
    if any(n in tl for n in _KEYPAD_NEEDLES) and _DIGITS_HINT.search(t):
        _typed_codes(t, add)
    _told(t, add)
    _pairs(t, add)
    if any(n in tl for n in _ANSWER_NEEDLES) and any(n in tl for n in _ASKED_NEEDLES):
        _answered(t, add)
    if any(n in tl for n in _FOREIGN_NEEDLES) or (
        ("password" in tl or "pin" in tl) and any(n in tl for n in _FOREIGN_VERB_NEEDLES)
    ):
        _foreign(t, add)

    for m in _CARD.finditer(t) if _DIGITS_HINT.search(t) else ():
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits) and len(set(digits)) > 1:
            add("card_number", m.start(), m.end())
    for m in _CARD_CODE.finditer(t) if _CARD_CODE_HINT.search(t) else ():  # "the CVV is 123"
        add("card_security_code", m.start("value"), m.end("value"))

    # the secret half of an AWS key pair: a 40-char base64-ish string in an AWS context
    if _AWS_CONTEXT.search(t):
        for m in _AWS_SECRET_CANDIDATE.finditer(t):
            v = m.group(0)
            if any(c.isupper() for c in v) and any(c.islower() for c in v) and (any(c.isdigit() for c in v) or "/" in v):
                add("aws_secret_key", m.start(), m.end())

    _high_entropy(view, add)


def _prose(view: View, add) -> None:
    t = view.text
    for m in _PROSE_PASSWORD.finditer(t):
        name = m.group("name").lower()
        taken = _value_past_hedges(t, m)
        if taken is None:
            continue
        quoted, vstart, value = taken
        if quoted:
            stripped = value.strip()
            if stripped and not _is_placeholder(stripped) and (len(stripped) >= 4 or "pin" in name):
                add("password_in_prose", vstart, vstart + len(value))
            continue
        value = value.rstrip(".,;:!?)")
        if len((m.group("qual") or "").split()) > _QUALIFIER_SHORT + 1:
            # a long qualifier ("of the team password manager"): only a value that cannot be a word
            if looks_like_password(value):
                add("password_in_prose", vstart, vstart + len(value))
            continue
        if _describes_the_password(t, m, value, vstart):
            told = _value_after_description(t, vstart + len(value))
            if told:
                add("password_in_prose", *told)
            continue
        # a passphrase of several plain words: "the passphrase is correct horse battery staple"
        words = _passphrase_words(t, vstart, name)
        if words:
            add("passphrase", vstart, words)
            continue
        if _is_placeholder(value) or value.lower() in _PROSE_NOT_A_SECRET or format_term(value):
            continue
        if is_code_reference(name, value, t, vstart) or re.match(r"[\w.]+\(", value):
            continue  # code: "password = request.POST[...]", "password: req.body.password"
        if name in ("token", "api key", "access key", "secret key", "secret") and not _value_is_secret("token", value):
            continue
        if name == "pin" and not value.isdigit():
            continue
        if len(value) < 3:
            continue
        add("password_in_prose", vstart, vstart + len(value))
    for m in _PROSE_DIRECT.finditer(t):
        raw = m.group("value").rstrip(".,;:!?)")
        value = raw.lstrip("(")  # "password (hashed with bcrypt)"
        vstart = m.start("value") + len(raw) - len(value)
        if value.lower() in _PROSE_NOT_A_SECRET or _PATH_LIKE.search(value) or value.startswith(("$", "%", "@")):
            continue  # a reference to where the password is ("--password /run/secrets/db", "$DB_PASSWORD")
        if looks_like_password(value):
            add("password_in_prose", vstart, vstart + len(value))
    for m in _PROSE_SET.finditer(t):  # "set the admin password to Kx8..."
        if m.group("quoted") is not None:
            value, vstart = m.group("quoted").strip(), m.start("quoted")
            ok = len(value) >= 4 and not _is_placeholder(value)
        else:
            value, vstart = m.group("value").rstrip(".,;:!?)"), m.start("value")
            if m.group("name").lower() == "pin":
                ok = value.isdigit() and 4 <= len(value) <= 8
            else:
                ok = (
                    looks_like_password(value) and not _PATH_LIKE.search(value) and not value.startswith(("$", "%", "@"))
                ) or set_word_is_password(t, value, vstart + len(value))
        if ok:
            add("password_in_prose", vstart, vstart + len(value))
    for m in _PROSE_AS.finditer(t):  # "use Kx8... as the password"
        value = m.group("value").rstrip(".,;:!?)")
        name = m.group("name").lower()
        credentials = name.startswith(("cred", "login"))
        if name == "pin":
            ok = value.isdigit() and 4 <= len(value) <= 8
        else:
            ok = strong_password(value) if credentials else as_password(value)
        if ok:
            kind = "credentials_in_prose" if credentials else "password_in_prose"
            add(kind, m.start("value"), m.start("value") + len(value))
    for m in _PROSE_PASS.finditer(t):  # "the pass is Kx8!mQ2zLp"
        value = m.group("value").rstrip(".,;:!?)")
        if strong_password(value):
            add("password_in_prose", m.start("value"), m.start("value") + len(value))
    for m in _PROSE_APPOSITIVE.finditer(t):  # "the admin password, Kx8mQ2zLp, must be rotated"
        value = m.group("value")
        if strong_password(value) and _value_is_secret("token", value):
            add("password_in_prose", m.start("value"), m.end("value"))
    for rx in (_PROSE_IS_THE, _PROSE_LINKED):  # "hunter2x is my password", "my password's hunter2x"
        for m in rx.finditer(t):
            value = m.group("value").rstrip(".,;:!?)")
            ok = value.isdigit() and 4 <= len(value) <= 8 if m.group("name").lower() == "pin" else as_password(value)
            if ok:
                add("password_in_prose", m.start("value"), m.start("value") + len(value))
    for i, j in words_named_the_password(t):  # "swordfish is my password"
        add("password_in_prose", i, j)
    for m in _USE_PASSWORD_WORD.finditer(t):  # "use password mango for the guest account"
        if used_password_word(t, m):
            add("password_in_prose", *m.span("value"))
    for m in _XML_SECRET.finditer(t):  # "<password>hunter2x</password>"
        if _value_is_secret(m.group("tag"), m.group("value")):
            add("credential_assignment", m.start("value"), m.end("value"))
    for m in _CONSTANT_IS.finditer(t):  # "the SECRET_KEY is django-insecure-..."
        value = m.group("value").rstrip(".,;:!?)")
        if looks_like_password(value) and _value_is_secret(m.group("name"), value):
            add("credential_assignment", m.start("value"), m.start("value") + len(value))
    for m in _PROSE_SET_SECRET.finditer(t):  # "set the cookie secret to 7f3k9Qz2Lm8Xw4Vb"
        quoted = m.group("quoted") is not None
        group = "quoted" if quoted else "value"
        value = m.group(group) if quoted else m.group(group).rstrip(".,;:!?)")
        if (
            (quoted or looks_like_password(value))
            and not _CONSTANT_NAME.fullmatch(value)
            and _value_is_secret("token", value, quoted)
        ):
            add("credential_assignment", m.start(group), m.start(group) + len(value))


_NEXT_VALUE = re.compile(r"\s+(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,120})(?P=q)|(?P<value>[^\s\"'`]+))")


def _value_past_hedges(t: str, m: re.Match) -> tuple[bool, int, str] | None:
    """The value of a ``_PROSE_PASSWORD`` match past hedging words ("is probably X", "is either X or Y"): whether it
    is quoted, where it starts and the value; None when only hedges follow the name."""
    if m.group("quoted") is not None:
        return True, m.start("quoted"), m.group("quoted")
    value, start = m.group("value"), m.start("value")
    while value.rstrip(".,;:!?)").lower() in HEDGES:
        after = _NEXT_VALUE.match(t, start + len(value))
        if after is None or value != value.rstrip(".,;:!?)"):
            return None  # the clause ends at the hedge: no value
        if after.group("quoted") is not None:
            return True, after.start("quoted"), after.group("quoted")
        value, start = after.group("value"), after.start("value")
    return False, start, value


def _describes_the_password(t: str, m: re.Match, value: str, start: int) -> bool:
    """A plain word after "is" / "was set to" that tells what happens to the password or how it is: a participle
    ("is emailed by HR", "is posted on the wall"), a listed state that ends the clause or goes on about it ("was
    stolen, please help", "was rejected three times", "is fine"), a listed adverb before one ("was accidentally
    deleted"), a length ("is six digits long"), "case sensitive", "about to expire", or an infinitive ("was set to
    expire every 90 days"). Only after a verb: "password: simple" gives the value."""
    if not re.fullmatch(r"[a-z]+", value):
        return False
    verb = (m.groupdict().get("verb") or "").lower()
    if verb.endswith(" to") and value in _INFINITIVES:
        return True
    after = start + len(value)
    if verb:
        if value == "case":
            return bool(_CASE_SENSITIVE.match(t, after))
        if value == "about":  # "about to expire", "about eight characters"
            count = _NEXT_WORD.match(t, after)
            return bool(_ABOUT_TO.match(t, after)) or (count is not None and _a_length(t, count.group(1), count.end()))
        if _a_length(t, value, after):  # "six digits long", "several characters"
            return True
        phrase = "phrase" in m.group("name").lower()
        if value in _STATE_WORDS and (_PHRASE_DESCRIPTION_END if phrase else _DESCRIPTION_END).match(t, after):
            return True
        if value in _STATE_ADVERBS:  # "accidentally deleted", "recently rotated"
            nxt = _NEXT_WORD.match(t, after)
            return nxt is not None and (nxt.group(1).lower() in _STATE_WORDS or nxt.group(1).lower().endswith("ed"))
    return (value.endswith("ed") or value in _IRREGULAR_PARTICIPLES) and bool(_PARTICIPLE_NEXT.match(t, after))


def _value_after_description(t: str, at: int) -> tuple[int, int] | None:
    """After a description of the password ("my password was stolen, it was Kx8mQ2zLp9"), the value its sentence
    still gives: a word that looks like a password, or a plain word after "it was" / "it's" / "which is"."""
    end = SENTENCE_END.search(t, at, at + 300)
    stop = end.start() if end else min(len(t), at + 300)  # a sentence's reach, bounded: linear in the text
    given = _COLON_VALUE.search(t, at, stop)  # "is six digits: 482913", "is temporary until Friday: bluebird"
    if given:
        word = given.group("value").rstrip(".,:;!?)")
        if len(word) >= 4 and not _is_placeholder(word) and word.lower() not in _PROSE_NOT_A_SECRET:
            return given.start("value"), given.start("value") + len(word)
    for m in CLAUSE_TOKEN.finditer(t, at, stop):
        word = m.group(0).rstrip(".,:;!?)")
        if word and looks_like_password(word) and not _PATH_LIKE.search(word) and word.lower() not in _PASSWORD_PRODUCTS:
            return m.start(), m.start() + len(word)
    told = _IT_WAS.search(t, at, stop)
    if told and set_word_is_password(t, told.group("value"), told.end("value")):
        return told.span("value")
    return None


def _a_length(t: str, word: str, after: int) -> bool:
    """``word`` (ending at ``after``) counts what follows it: "six digits", "12 characters"."""
    return (word.isdigit() or word.lower() in _NUMBER_WORDS) and bool(_LENGTH_NEXT.match(t, after))


_NEXT_WORD = re.compile(r"\s++([A-Za-z0-9]++)")
_COLON_VALUE = re.compile(r":\s*+(?P<value>[^\s,;()\[\]{}<>\"'`]++)")
_PASSWORD_PRODUCTS = {"1password"}  # "the password is shared through 1password": where it is kept
_IT_WAS = re.compile(r"(?i)\b(?:it|which)(?:'s|\s++(?:is|was))\s++(?P<value>[A-Za-z][a-z]*+)\b")
_NUMBER_WORDS = set(
    """
    two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen twenty thirty
    several many few
    """.split()
)
_LENGTH_NEXT = re.compile(r"(?i)\s++(?:digits?|characters?|chars|letters?|words?|numbers?|symbols?)\b")
_CASE_SENSITIVE = re.compile(r"(?i)[\s\-]++(?:in)?sensitive\b")
_ABOUT_TO = re.compile(r"(?i)\s++to\s++[a-z]")


def _codes(t: str, add) -> None:
    """One-time-password seeds and door / alarm / safe codes, named as such (see ``rules._OTP_SEED``)."""
    for m in _OTP_SEED.finditer(t):
        value = m.group("value")
        if any(c in "234567" for c in value):
            add("otp_seed", m.start("value"), m.end("value"))
    for m in _SEED_INTO_APP.finditer(t):  # "add JBSWY3DPEHPK3PXP to the app", not a constant ("SETTING2")
        if re.search(r"[2-7][A-Za-z]", m.group("value")):
            add("otp_seed", m.start("value"), m.end("value"))
    for rx in (_ACCESS_CODE, _KEYED_CODE, _PIN_GIVEN):
        for m in rx.finditer(t):  # "the alarm code is 1234", "gate code 4821#", "use PIN 4821"
            add("access_code", m.start("value"), m.end("value"))
    for m in _DOOR_CODE.finditer(t):  # "the code is 4829 for the front door"
        add("access_code", m.start("value"), m.end("value"))
    for m in _RECOVERY_CODES.finditer(t):  # "my recovery codes are 8f3k-2j9d, 7h2m-4k8p"
        add("recovery_code", m.start("value"), m.end("value"))


def _typed_codes(t: str, add) -> None:
    """A code typed where it opens: "enter 4821 on the keypad", "at the keypad, enter 4821"."""
    for rx in (_CODE_ENTERED, _KEYPAD_THEN_CODE):
        for m in rx.finditer(t):
            add("access_code", m.start("value"), m.end("value"))


def _told(t: str, add) -> None:
    """Seed, recovery and unlock phrases named as such, a bare wallet mnemonic, credentials told as a story (see
    ``prose``)."""
    for m in _PHRASE.finditer(t):
        kind = "passphrase" if m.group("name").lower().startswith(("unlock", "secret")) else "seed_phrase"
        if m.group("quoted") is not None:
            if not _is_placeholder(m.group("quoted")):
                add(kind, m.start("quoted"), m.end("quoted"))
            continue
        end = phrase_words_end(t, m)
        if end is not None:
            add(kind, m.start("value"), end)
    for i, j in mnemonic_runs(t):
        add("seed_phrase", i, j)
    for m in _LOGIN_STORY.finditer(t):  # "logs in as admin with hunter2"
        span = login_story_is_secret(t, m)
        if span:
            add("credentials_in_prose", *span)


def _answered(t: str, add) -> None:
    """A password, PIN or code asked for and answered in the same text ("Q: what's the wifi password? A: ...", "wifi
    password? -> ..."; see ``prose.answered_value``)."""
    for m in _ANSWERED.finditer(t):
        span = answered_value(t, m)
        if span:
            add("secret_in_answer", *span)


def _foreign(t: str, add) -> None:
    """A password told in Spanish, French, German, Portuguese or Italian ("mi contraseña es ...", "mein Passwort ist
    ..."; see ``prose.foreign_value_span``)."""
    for m in _FOREIGN_PASSWORD.finditer(t):
        span = foreign_value_span(t, m)
        if span:
            add("password_in_prose", *span)


def _cli_word(m: re.Match) -> tuple[int, int, bool]:
    """Span of the shell word a ``_COMMAND_LINE`` pattern captured (inside its quotes) and whether it was quoted."""
    for group in ("sq", "dq"):
        if m.group(group) is not None:
            return m.start(group), m.end(group), True
    i, j = m.span("bare")
    value = m.group("bare").rstrip(".,;:!?)")
    return i, i + len(value), False


def _command_line(t: str, add) -> None:
    """Passwords and tokens given as command-line flags (see ``rules._COMMAND_LINE``)."""
    for kind, mode, sep, rx in _COMMAND_LINE:
        for m in rx.finditer(t):
            i, j, quoted = _cli_word(m)
            value = t[i:j]
            if mode == "pair":
                if command_line_pair_is_secret(value, sep, quoted):
                    add(kind, i, j)
            elif command_line_value_is_secret(mode, value, quoted):
                add(kind, i, j)
            elif mode == "spaced" and not quoted and flag_word_is_password(t, i, j):
                add(kind, i, j)  # "redis-cli -a hunter -h cache", "use redis-cli -a hunter to flush it"
    for m in _HTPASSWD.finditer(t):
        flags = m.group("flags").replace("-", "")
        if "b" not in flags:
            continue  # without -b htpasswd prompts for the password
        words = list(re.finditer(r"\S+", m.group("args")))
        k = 1 if "n" in flags else 2  # [file] user password
        if len(words) > k:
            w = words[k]
            value = w.group(0).rstrip(".,;:!?)")
            quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "'\""
            if quoted:
                value = value[1:-1]
            i = m.start("args") + w.start() + (1 if quoted else 0)
            if command_line_value_is_secret("attached", value, quoted):
                add("command_line_password", i, i + len(value))
    for m in _PROSE_USER_PASS.finditer(t):  # "user admin pass Kx8..."
        value, user = m.group("value").rstrip(".,;:!?)"), m.group("user")
        if user.lower() in _PROSE_NOT_A_SECRET | _STOPWORDS:
            continue  # "the username field and password field"
        if prose_credential_is_secret(value, pair=True, user=user):
            add("credentials_in_prose", m.start("value"), m.start("value") + len(value))
    for m in _PROSE_CREDENTIALS.finditer(t):
        if m.group("pair_value") is not None:
            value = m.group("pair_value").rstrip(".,;:!?)")
            if prose_credential_is_secret(value, pair=True, user=m.group("user")):
                add("credentials_in_prose", m.start("user"), m.start("pair_value") + len(value))
        else:
            value = m.group("value").rstrip(".,;:!?)")
            if prose_credential_is_secret(value, pair=False):
                add("credentials_in_prose", m.start("value"), m.start("value") + len(value))


def _pairs(t: str, add) -> None:
    """A user and password pair after a login ("log in to staging with admin / Kx8..."), a well-known account with
    a password of letters, digits and a symbol, bare ("admin:Kx8!... is what it accepts"; not "deploy:deploy", a
    user and group, a port, a tag or a Kubernetes name: ``rules.bare_pair_is_secret``), a value after "with secret" /
    "using password"."""
    for rx in (_LOGIN_WITH_PAIR, _ACCOUNT_PAIR):
        for m in rx.finditer(t):
            value = m.group("pair_value").rstrip(".,;:!?)")
            end = m.start("pair_value") + len(value)
            if bare_pair_is_secret(t, m.group("user"), value, end):
                add("credentials_in_prose", m.start("user"), end)
    for m in _WITH_SECRET.finditer(t):
        value = m.group("value").rstrip(".,;:!?)")
        if prose_credential_is_secret(value, pair=False):
            add("credentials_in_prose", m.start("value"), m.start("value") + len(value))


_ALPHA_RUN = re.compile(r"[A-Za-z]+")
_SPACES = re.compile(r" +")


def _passphrase_words(t: str, i: int, name: str) -> int | None:
    """End of a run of >= 3 plain words starting at ``i`` that reads as a passphrase, else None.

    Stops at punctuation or a function word. Rejected when the run reads as prose about the
    password: inflected verbs/adverbs ("-ed", "-ly", "-ing") or two words that describe
    passwords ("required", "stored", ...)."""
    if name not in ("password", "passphrase", "pass phrase", "passcode", "passwd", "wifi key"):
        return None
    words: list[str] = []
    end = i
    pos = i
    while len(words) < 8:
        m = _ALPHA_RUN.match(t, pos)
        if not m:
            break
        w = m.group(0)
        if w.lower() in _STOPWORDS:
            break
        words.append(w.lower())
        end = m.end()
        nxt = _SPACES.match(t, end)
        if not nxt:
            break
        pos = nxt.end()
    need = 2 if "phrase" in name else 3
    if words and words[0] in _PROSE_NOT_A_SECRET:
        need = 4  # "the password is incorrect three times" vs "... is correct horse battery staple"
    if len(words) < need:
        return None
    if any(w.endswith(("ed", "ly", "ing")) for w in words):
        return None
    if sum(w in _PROSE_NOT_A_SECRET for w in words) >= 2:
        return None
    return end


def _high_entropy(view: View, add) -> None:
    """detect-secrets Base64/Hex high-entropy checks on unquoted tokens, with its heuristic filters."""
    t = view.text
    for m in _B64_TOKEN.finditer(t):
        tok = m.group(1).rstrip("-_")
        i = m.start(1)
        j = i + len(tok)
        if len(tok) < 20:
            continue
        is_hex = bool(_HEX_ONLY.fullmatch(tok))
        if is_hex:
            if len(tok) < 32 or _HEX_PLUGIN.calculate_shannon_entropy(tok) <= _HEX_PLUGIN.entropy_limit:
                continue
            plugin = _HEX_PLUGIN
        else:
            if _B64_PLUGIN.calculate_shannon_entropy(tok) <= _B64_PLUGIN.entropy_limit:
                continue
            plugin = _B64_PLUGIN
        if (
            ds_heuristic.is_sequential_string(tok)
            or ds_heuristic.is_potential_uuid(tok)
            or ds_heuristic.is_templated_secret(tok)
            or ds_heuristic.is_not_alphanumeric_string(tok)
            or ds_heuristic.is_likely_id_string(tok, t[max(0, i - 40) : j], plugin)
        ):
            continue
        before = t[max(0, i - 40) : i]
        if _HASH_CONTEXT.search(before) and not _SECRET_CONTEXT.search(before[-20:]):
            continue  # "commit 3f2a...", "sha256 digest ..."
        if is_hex and len(tok) in (40, 64) and i > 0 and t[i - 1] == "@":
            continue  # a pinned commit ("actions/checkout@<sha>", "pkg@<sha>")
        if _in_url_path(t, i):
            continue  # a path segment of a URL (document ids, slugs); secrets in URLs are caught by name
        if _PUBLIC_KEY_CONTEXT.search(t[max(0, i - 200) : i]):
            continue  # an SSH public key or a certificate / public key block: not a secret
        if "/" in tok and all(re.fullmatch(r"[a-z0-9_.\-]*", seg) for seg in tok.split("/")):
            continue  # a lowercase path
        if not is_hex:
            decoded = decode_b64(tok)
            if decoded is not None and _natural_language(decoded):
                continue  # base64 of ordinary words: scanned as text by _decoded(), not a key
        add("hex_high_entropy_secret" if is_hex else "high_entropy_secret", i, j)


def _split_hex(view: View, orig: str, hits: list[_Hit]) -> None:
    """A long hex secret written in groups ("9f2c4e6a 8b0d1f3e ..."), found in a collapsed view."""
    t = view.text
    for m in _HEX_SPLIT.finditer(t):
        i, j = m.span()
        if not view.crosses_gap(i, j) or not _chunk_ok(view, i, j):
            continue
        cuts = [i] + [g for g in range(i + 1, j) if view.gap_before[g]] + [j]
        if min(b - a for a, b in zip(cuts, cuts[1:], strict=False)) < 4:
            continue  # groups of at least four hex digits
        tok = m.group(0)
        if _HEX_PLUGIN.calculate_shannon_entropy(tok) <= _HEX_PLUGIN.entropy_limit or ds_heuristic.is_sequential_string(tok):
            continue
        s, e = view.orig_span(i, j)
        before = orig[max(0, s - 40) : s]
        if _HASH_CONTEXT.search(before) and not _SECRET_CONTEXT.search(before[-20:]):
            continue
        hits.append(("hex_high_entropy_secret", s, e, view.name))
