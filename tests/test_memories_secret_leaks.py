"""Secrets the memory gate found must not be kept anywhere: in the quarantine's side fields (topic, tags, metadata,
source ids) and preview, past the cut of a long lesson, in a feedback reason; the preview redacts every value a
sentence gives; more ways of stating a password are found (a plain word named the password, an access code told by its
context, a password asked for and answered in one lesson, a password told in another language); code that passes a
password around is not a secret, a snake_case literal assigned to a password is."""

import math
import time

import pytest
from django.test import override_settings

from memories import write_gate
from memories.extraction import extract_deterministic
from memories.models import Memory, MemoryQuarantine
from memories.secrets import find_secrets, rules
from memories.services import memory_deprecate
from tests.conftest import OBSERVE, OUTCOME, make_memory

CLEAN_LESSON = "Rotate the application logs with logrotate every night and keep fourteen compressed copies."


def _observe(api, answer, meta=None, question="Please remember this."):
    body = {"user_id": "alice", "user_message": question, "assistant_message": answer, "meta": meta or {}}
    r = api.post(OBSERVE, body, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def _quarantined_text(item: MemoryQuarantine) -> str:
    """Everything the quarantine keeps of a blocked lesson, as one text."""
    return "\n".join(
        [
            item.topic,
            *item.tags,
            item.redacted_preview,
            repr(item.metadata),
            item.source_session_id,
            item.source_message_id,
            item.reason_detail,
        ]
    )


def _nothing_kept(secrets):
    """No memory holds any of ``secrets``; the quarantine holds none of them either."""
    for secret in secrets:
        assert not Memory.objects.filter(content__contains=secret).exists(), secret
        for item in MemoryQuarantine.objects.all():
            assert secret not in _quarantined_text(item), (secret, _quarantined_text(item))


# --- a secret found in the side fields is redacted in every field ---------------------------------------------


SIDE_FIELDS = [
    ({"filters": {"db_password": "Sup3rS3cret!x", "wifi_password": "bluebird"}}, ["Sup3rS3cret!x", "bluebird"]),
    ({"filters": {"creds": {"password": "Hunter2Staging9"}}}, ["Hunter2Staging9"]),
    ({"tags": ["password", "Hunter2Staging9"]}, ["Hunter2Staging9"]),
    ({"topic": "the wifi password is", "tags": ["bluebird"]}, ["bluebird"]),
    ({"session_id": "password:", "message_id": "Hunter2Staging9"}, ["Hunter2Staging9"]),
    # a token split over two tags: the finding spans both fields
    ({"tags": ["ghp_aB3dE5fG7hJ9kL1mN3", "pQ5rS7tU9vW1xY3z5A"]}, ["aB3dE5fG7hJ9", "pQ5rS7tU9vW1"]),
]


@pytest.mark.django_db
@pytest.mark.parametrize("meta, secrets", SIDE_FIELDS, ids=[f"side{i}" for i in range(len(SIDE_FIELDS))])
def test_a_secret_in_the_side_fields_is_kept_nowhere(api, meta, secrets):
    body = _observe(api, CLEAN_LESSON, meta)
    assert body["decision"] == "blocked" and body["evidence"]["reason"] == "secret", body
    _nothing_kept(secrets)
    item = MemoryQuarantine.objects.get(user_id="alice")
    assert item.redacted_preview == CLEAN_LESSON  # the clean lesson is kept as it was


@pytest.mark.django_db
def test_the_metadata_keeps_its_keys_and_clean_values(api):
    filters = {"db_password": "Sup3rS3cret!x", "team": "ops", "nested": {"password": "Hunter2Staging9", "region": "eu"}}
    _observe(api, CLEAN_LESSON, {"filters": filters})
    metadata = MemoryQuarantine.objects.get(user_id="alice").metadata
    assert set(metadata) == {"db_password", "team", "nested"} and metadata["team"] == "ops"
    assert metadata["nested"]["region"] == "eu"
    assert metadata["db_password"].startswith("[REDACTED:") and metadata["nested"]["password"].startswith("[REDACTED:")


LESSONS_NAMED_BY_THE_TOPIC = [
    # the derived topic "password hunter2x works" shows the secret, the lesson alone does not
    ("My password (it is hunter2x) works on staging and on the build box.", {}),
    ("Log in to the staging box with hunter2x before every deploy of the app.", {"topic": "staging password hunter2x"}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("answer, meta", LESSONS_NAMED_BY_THE_TOPIC, ids=["derived_topic", "given_topic"])
def test_a_secret_the_topic_shows_is_redacted_from_the_preview(api, answer, meta):
    body = _observe(api, answer, meta)
    assert body["decision"] == "blocked" and body["evidence"]["reason"] == "secret", body
    item = MemoryQuarantine.objects.get(user_id="alice")
    assert "hunter2x" not in item.redacted_preview and "[REDACTED:" in item.redacted_preview
    _nothing_kept(["hunter2x"])


# --- the lesson is cut between tokens, and gated whole --------------------------------------------------------


def _lesson_with_secret_at_the_cut(secret: str, inside: int) -> str:
    """A lesson whose cut (at 1200 characters) falls ``inside`` characters into ``secret``: one sentence of words."""
    words = "Connect the nightly reporting job to the warehouse with " + "the job reads every table " * 60
    lead = words[: 1200 - inside - 1]
    lead = lead[:-1] + "x" if lead.endswith(" ") else lead  # one space before the secret (runs of spaces collapse)
    return f"{lead} {secret} and keep the job on its own warehouse user"


TOKENS_AT_THE_CUT = [
    ("postgres://admin:Sup3rS3cretPassw0rd@db.internal:5432/reports", len("postgres://admin:Sup3rS3cretPassw0rd")),
    ("ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", 20),
    ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", 20),
    (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        20,
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("secret, inside", TOKENS_AT_THE_CUT, ids=["postgres_url", "github", "stripe", "jwt"])
def test_a_secret_cut_at_the_length_limit_is_blocked(api, secret, inside):
    answer = _lesson_with_secret_at_the_cut(secret, inside)
    assert answer.index(secret) + inside == 1200
    with override_settings(MEMORY_MAX_CONTENT_CHARS=1200):
        body = _observe(api, answer)
    assert body["decision"] == "blocked" and body["evidence"]["reason"] == "secret", body
    _nothing_kept([secret[:12], secret[inside - 12 : inside]])
    assert secret[:inside] not in MemoryQuarantine.objects.get(user_id="alice").redacted_preview


@pytest.mark.django_db
def test_a_secret_past_the_cut_blocks_the_lesson(api):
    token = "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"
    answer = "Rotate the logs every night. " * 60 + f"The deploy token is {token} for the runner."
    with override_settings(MEMORY_MAX_CONTENT_CHARS=1200):
        body = _observe(api, answer)
    assert body["decision"] == "blocked" and "github_token" in body["evidence"]["kinds"], body
    assert not Memory.objects.exists()
    _nothing_kept([token[:12]])


@override_settings(MEMORY_MAX_CONTENT_CHARS=30)
def test_the_cut_falls_between_tokens_and_the_artifact_keeps_the_whole_lesson():
    answer = "Connect with postgres://admin:Sup3rS3cretPassw0rd@db.internal:5432/reports tonight"
    artifact = extract_deterministic(user_message="note this", assistant_message=answer)
    assert artifact.content == "Connect with…"
    assert artifact.uncut_content == answer
    one_token = extract_deterministic(user_message="note this", assistant_message="x" * 40 + " and more words")
    assert one_token.content == ""  # a token longer than the limit is dropped, never kept in part
    short = extract_deterministic(user_message="note this", assistant_message="Use logrotate nightly.")
    assert short.content == "Use logrotate nightly." and short.uncut_content == ""


# --- a feedback reason is redacted before it is stored --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", ["failure", "success"])
def test_an_outcome_reason_keeps_no_secret(api, outcome):
    memory = make_memory(user="alice")
    reason = "wrong box; the root password is Tulip!Garden88"
    r = api.post(OUTCOME, {"user_id": "alice", "memory_ids": [memory.pk], "outcome": outcome, "reason": reason}, format="json")
    assert r.status_code == 200, r.content
    memory.refresh_from_db()
    assert "Tulip!Garden88" not in memory.status_reason and memory.status_reason.startswith("wrong box; the root password")
    trail = Memory.history.model.objects.filter(id=memory.pk).values_list("status_reason", flat=True)
    assert trail and not any("Tulip!Garden88" in reason for reason in trail)


@pytest.mark.django_db
def test_a_reviewers_deprecate_reason_keeps_no_secret():
    memory = make_memory(user="alice")
    memory_deprecate(memory=memory, actor="admin:rev", reason="leaked: DB_PASSWORD=Sup3rS3cret!x in the text")
    memory.refresh_from_db()
    assert memory.status == "deprecated" and "Sup3rS3cret" not in memory.status_reason
    assert "[REDACTED:" in memory.status_reason
    trail = Memory.history.model.objects.filter(id=memory.pk).values_list("status_reason", flat=True)
    assert not any("Sup3rS3cret" in reason for reason in trail)


# --- the preview redacts every value the sentence gives --------------------------------------------------------

# (lesson, the secrets that must not survive, words that stay)
EVERY_VALUE = [
    ("Passwords: staging hunter2x, prod hunter3x.", ["hunter2x", "hunter3x"], ["Passwords:", "prod"]),
    ("My passwords are hunter2x and hunter3x on the build boxes.", ["hunter2x", "hunter3x"], ["build boxes"]),
    ("My password is probably Tulip!Garden88 on staging.", ["Tulip!Garden88"], ["probably", "on staging"]),
    ("The password is either Tulip!Garden88 or Rose!Garden77 on staging.", ["Tulip!Garden88", "Rose!Garden77"], ["either"]),
    ("The password is usually Tulip!Garden88 on the lab hosts.", ["Tulip!Garden88"], ["usually"]),
    ("Pay with the card 4111 1111 1111 1111 and the CVV is 123.", ["4111", "123"], ["the CVV is"]),
    ("The card CVC: 4821 is printed on the back of the company card.", ["4821"], ["printed on the back"]),
]


@pytest.mark.parametrize("text, secrets, kept", EVERY_VALUE, ids=[f"value{i}" for i in range(len(EVERY_VALUE))])
def test_every_value_of_the_sentence_is_redacted(text, secrets, kept):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    redacted = write_gate.redact(text)
    for secret in secrets:
        assert secret not in redacted, redacted
    for word in kept:
        assert word in redacted, redacted


@pytest.mark.django_db
def test_the_quarantine_preview_redacts_the_second_password(api):
    body = _observe(api, "My passwords are hunter2x and hunter3x on the build boxes.")
    assert body["decision"] == "blocked"
    _nothing_kept(["hunter2x", "hunter3x"])


# --- more ways of stating a password ---------------------------------------------------------------------------

STATED = [
    ("hunter2x is the password for the staging box.", "hunter2x"),
    ("Remember that hunter2x is my password on the lab hosts.", "hunter2x"),
    ("My password's hunter2x on the lab hosts.", "hunter2x"),
    ("My password, which is hunter2x, works on staging.", "hunter2x"),
    ("The service config has <password>hunter2x</password> in it.", "hunter2x"),
    ("Staging password -> hunter2x for the deploy user.", "hunter2x"),
    ("The Django SECRET_KEY is django-insecure-q9#x!2m@7z$k&4w*p on staging.", "q9#x!2m@7z$k"),
    ("Set the cookie secret to 7f3k9Qz2Lm8Xw4Vb on every web node.", "7f3k9Qz2Lm8Xw4Vb"),
]


@pytest.mark.parametrize("text, secret", STATED, ids=[f"stated{i}" for i in range(len(STATED))])
def test_a_stated_password_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    assert secret not in write_gate.redact(text)


# lessons near those forms that name no secret
NOT_STATED = [
    "bcrypt is the password hasher Django recommends for new projects.",
    "Argon2 is the password hashing algorithm we use for every service.",
    "The password's length must be at least twelve characters everywhere.",
    "Go to Password -> Settings -> Security to change it in the portal.",
    "The password, which is stored in Vault, rotates every month automatically.",
    "The SECRET_KEY is loaded from the environment on every web node.",
    "DB_PASSWORD is set in the env file of the deploy user, never in code.",
    "Set the token to expire after one hour for the public clients.",
    "Set the secret to SECRET_KEY_V2 in the settings of the web nodes.",
    "The <passwordMinLength>1200</passwordMinLength> element sets the policy.",
    "The CVV is 3 digits printed on the back of the company card.",
    "The password is probably stored in the shared vault of the team.",
]


@pytest.mark.parametrize("text", NOT_STATED, ids=[f"not_stated{i}" for i in range(len(NOT_STATED))])
def test_a_lesson_near_those_forms_names_no_secret(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- code that passes a password around is no secret -------------------------------------------------------------

CODE_REFERENCES = [
    "password = request.POST['password']",
    "user = authenticate(username=username, password=password)",
    "password = getpass.getpass()",
    "self.password = make_password(raw)",
    "db_password = config.db.password",
    "if password == confirm_password:",
    "token = request.headers['Authorization']",
    "const password = req.body.password;",
    "password = form.cleaned_data['password']",
    "user.password = hashed_password",
    "password = input('Password: ')",
    "password = user_input",
    "const password = userInput;",
    "def connect():\n    password = read_secret\n    return db.connect(password=password)",
    "secret_key = settings.SECRET_KEY",
    # a placeholder or the name of where the secret is kept, not a literal
    "password: not_set",
    "password: see_vault",
    "password = secret_name",
    # a value spelling out the secret word its abbreviated name stands for ("DB_PASS" is how one rule reads the name)
    "export DB_PASSWORD=db_password_prod",
    "DB_PASSWORD=prod_db_password",
    "export DB_PASS=db_password_prod",
]


@pytest.mark.parametrize("line", CODE_REFERENCES, ids=[f"code{i}" for i in range(len(CODE_REFERENCES))])
def test_code_reading_a_password_is_not_a_secret(line):
    assert find_secrets(line) == [], find_secrets(line)


CODE_LITERALS = [
    ('password = "hunter2x"', "hunter2x"),
    ("DB_PASSWORD=Sup3rS3cret!x", "Sup3rS3cret!x"),
    ("db_password = p4ss.w0rd", "p4ss.w0rd"),
    ("password = 'raw_password'", "raw_password"),
    ("const password = 'Tulip!Garden88';", "Tulip!Garden88"),
    # an unquoted snake_case word is a value unless it reads as code
    ("PASSWORD=hunter_two", "hunter_two"),
    ("db_password: my_secret_pw", "my_secret_pw"),
    ("```\nDB_PASSWORD=hunter_two\nDEBUG=1\n```", "hunter_two"),
    ("The staging password is hunter_two for now.", "hunter_two"),
]


@pytest.mark.parametrize("line, secret", CODE_LITERALS, ids=[f"literal{i}" for i in range(len(CODE_LITERALS))])
def test_a_password_literal_in_code_is_still_a_secret(line, secret):
    assert find_secrets(line), line
    assert secret not in write_gate.redact(line)


@pytest.mark.django_db
def test_a_login_snippet_is_saved(api):
    answer = (
        "```python\n"
        "def login_view(request):\n"
        "    password = request.POST['password']\n"
        "    user = authenticate(username=request.POST['username'], password=password)\n"
        "    if user is None:\n"
        "        return HttpResponse(status=401)\n"
        "```"
    )
    body = _observe(api, answer, question="How do I check a login in a Django view?")
    assert body["decision"] == "saved", body
    assert Memory.objects.filter(content__contains="authenticate(").exists()


# --- a plain word named the password before its name ------------------------------------------------------------

NAMED_FIRST = [
    ("swordfish is my password", "swordfish"),
    ("hunter2 is the wifi password", "hunter2"),
    ("Swordfish is my wifi password.", "Swordfish"),
    ("Remember that bluebird is the db password for staging.", "bluebird"),
    ("Note: sunshine is also my admin passcode on the NAS.", "sunshine"),
    ("correcthorse is the passphrase, do not share it.", "correcthorse"),
    ("swordfish is the password, don't share it.", "swordfish"),
    ("bluebird is my password for the router.", "bluebird"),
    # ends like an adverb but is no English word's ("dragonf"); a bare "the password" for a device, network, host
    ("dragonfly is my password", "dragonfly"),
    ("Butterfly is the wifi password.", "Butterfly"),
    ("swordfish is the password for the router", "swordfish"),
    ("Swordfish is the password to the wifi.", "Swordfish"),
    ("tulip is the password to log into my laptop", "tulip"),
    ("tulip is the password for db01", "tulip"),
]


@pytest.mark.parametrize("text, secret", NAMED_FIRST, ids=[f"named_first{i}" for i in range(len(NAMED_FIRST))])
def test_a_word_named_the_password_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    redacted = write_gate.redact(text)
    assert secret not in redacted and redacted.startswith(text[: text.index(secret)]), redacted


NOT_NAMED_FIRST = [
    "this is my password manager",
    "what is my password policy",
    "forgetting is my password problem",
    "the password is required",
    "Bitwarden is my password manager of choice.",
    "Length is the password rule that matters most.",
    "Biometrics is the password of the future.",
    "Mine is the password with the symbols.",
    "Yes, that is my password.",
    "Here is the password reset link for the team.",
    # sayings and a field's place, not a secret: a common word "is the password" to / for something or before more prose
    "Patience is the password to success.",
    "Trust is the password, and everything else follows.",
    "Consistency is the password for growth in this team.",
    "The first field is the username, second is the password.",
    # a participle before "is" gives the password after it; a gerund, an adverb
    "Attached is the password.",
    "Following is the password for the router:",
    "Missing is the password for the router, ask ops.",
    "Reading is my password to another world.",
    # whoever's password it is, one to an abstract thing is a saying; a door has a code, not a password
    "Patience is my password to success.",
    "Hard work is the password for a happy life.",
    "Kindness is the password to open any door.",
    "Knowledge is the password to the world.",
    "Effort is the password to the account of success.",
]


@pytest.mark.parametrize("text", NOT_NAMED_FIRST, ids=[f"not_named_first{i}" for i in range(len(NOT_NAMED_FIRST))])
def test_prose_about_a_password_names_no_word(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- access codes told by their context -----------------------------------------------------------------------

ACCESS_CODES = [
    ("enter 4821 on the keypad", "4821"),
    ("the door code is 4821", "4821"),
    ("gate code 4821#", "4821"),
    ("the alarm code is 1234", "1234"),
    ("the safe combination is 12-34-56", "12-34-56"),
    ("use PIN 4821", "4821"),
    ("Punch in 7302# at the gate to get into the car park.", "7302"),
    ("Use 1234 to disarm the alarm in the morning.", "1234"),
    ("At the keypad, enter 5519 and push the door.", "5519"),
    ("my pin 4821", "4821"),
    ("the PIN 4821 opens the card", "4821"),
    ("Enter 4821 at the door for the delivery.", "4821"),
]


@pytest.mark.parametrize("text, secret", ACCESS_CODES, ids=[f"access_code{i}" for i in range(len(ACCESS_CODES))])
def test_an_access_code_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    assert secret not in write_gate.redact(text)


NOT_ACCESS_CODES = [
    "call extension 4821",
    "order 4821 shipped",
    "room 4821",
    "the error code is 4821",
    "zip code 94103",
    "HTTP status code 404",
    "area code 415",
    "version 1.2.3",
    "Enter 1234 in the search box to find the ticket.",
    "Use 2048 for the key size of new certificates.",
    "The building code 2018 edition applies to the new wing.",
    "GPIO pin 1234 is wired to the relay.",
    "Dial 4821 for the front desk.",
    # a lower-case "pin" without a determiner is another pin; a place word that does not end its phrase is no place
    "pin 1234 of the header",
    "Pin 2048 to the dashboard.",
    "Use 2024 for the door prize raffle.",
    "Press 1234 on the lock screen to unlock your phone.",
]


@pytest.mark.parametrize("text", NOT_ACCESS_CODES, ids=[f"not_access_code{i}" for i in range(len(NOT_ACCESS_CODES))])
def test_a_number_without_an_access_context_is_no_secret(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- a password asked for and answered in one lesson ---------------------------------------------------------------

ANSWERED = [
    ("Q: what's the wifi password? A: tr0ub4dor&3", "tr0ub4dor&3"),
    ("User asked for the wifi password. Answer: BlueSky2024", "BlueSky2024"),
    ("wifi password? -> BlueSky2024", "BlueSky2024"),
    ("Q: wifi password?\nA: bluebird", "bluebird"),
    ("User: what's the guest wifi password?\nAssistant: swordfish", "swordfish"),
    ("Q: what's the code for the door? A: 4821", "4821"),
]


@pytest.mark.parametrize("text, secret", ANSWERED, ids=[f"answered{i}" for i in range(len(ANSWERED))])
def test_a_password_answered_in_the_lesson_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    assert secret not in write_gate.redact(text)


NOT_ANSWERED = [
    "Q: How do I reset my password? A: Settings, then Security.",
    "Q: What is the password policy? A: twelve characters and a symbol.",
    "Q: Where is the wifi password stored? A: Vault",
    "What's the error code? A: 4821",
    "Q: What's the key for sorting? A: created_at",
    "Q: what's the admin password? A: ask Bob.",
    "Q: what's the admin password? A: Confidential.",
    "Q: which password manager do we use? A: Bitwarden",
]


@pytest.mark.parametrize("text", NOT_ANSWERED, ids=[f"not_answered{i}" for i in range(len(NOT_ANSWERED))])
def test_a_question_about_a_password_names_no_secret(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- a password told in another language ----------------------------------------------------------------------------

FOREIGN = [
    ("mi contraseña es swordfish", "swordfish"),
    ("La contraseña del wifi es perro.", "perro"),
    ("la clave es swordfish", "swordfish"),
    ("el pin es 1234", "1234"),
    ("mon mot de passe est swordfish", "swordfish"),
    ("Le mot de passe du wifi est soleil.", "soleil"),
    ("mein Passwort ist swordfish", "swordfish"),
    ("Das WLAN-Passwort lautet Sonnenschein.", "Sonnenschein"),
    ("minha senha é swordfish", "swordfish"),
    ("A senha do wifi é cachorro.", "cachorro"),
    ("la mia password è gattino", "gattino"),
    # "é" typed without its accent, before the end of the sentence
    ("a senha e abacaxi", "abacaxi"),
    ("A senha do wifi e abacaxi.", "abacaxi"),
    ("minha senha e cachorro, não conte.", "cachorro"),
    # a common word after "clave": someone's or a device's key, or a bare one ending the sentence on a noun
    ("mi clave es perro", "perro"),
    ("La clave del wifi es mariposa.", "mariposa"),
    ("la clave es mariposa", "mariposa"),
]


@pytest.mark.parametrize("text, secret", FOREIGN, ids=[f"foreign{i}" for i in range(len(FOREIGN))])
def test_a_password_told_in_another_language_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, result
    assert secret not in write_gate.redact(text)


NOT_FOREIGN = [
    "la clave es la paciencia",
    "la clave es tener paciencia",
    "la clave del éxito es la constancia",
    "mi contraseña es muy larga",
    "la contraseña es obligatoria",
    "el pin es obligatorio",
    "le mot de passe est incorrect",
    "le mot de passe est stocké dans Vault",
    "das Passwort ist abgelaufen",
    "Das Passwort ist mindestens 12 Zeichen lang",
    "a senha é obrigatória",
    "a senha é alterada todo mês",
    "la password è scaduta",
    # participles of the language that matched, and words that say any value will do
    "la password è cambiata ogni mese",
    "la password è impostata dall'amministratore",
    "la password è richiesta per accedere",
    "la password è salvata nel vault",
    "le mot de passe est requise pour se connecter",
    "la contraseña es cualquier palabra que elijas",
    # an unaccented "e" as "and", before a form's next step; the key to something: an abstract noun, an infinitive,
    # an adjective
    "a senha e o usuário estão no cofre",
    "a senha e o login são obrigatórios.",
    "Digite o usuário, a senha e confirme.",
    "Preencha o e-mail, a senha e usuário.",
    "a senha e alterada todo mês",
    "La clave es comunicación.",
    "La clave es disciplina.",
    "la clave es sencilla.",
    "mi clave es paciencia",
    "La clave es escuchar al cliente.",
    "A chave do sucesso é disciplina.",
]


@pytest.mark.parametrize("text", NOT_FOREIGN, ids=[f"not_foreign{i}" for i in range(len(NOT_FOREIGN))])
def test_prose_about_a_password_in_another_language_names_no_secret(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- a plain word used as the password in mid-sentence ------------------------------------------------------------

USED_WORD = [
    ("I set the password to tulip yesterday", "tulip"),
    ("I set the password to tulip42 yesterday", "tulip42"),
    ("We changed the router password to mango last week.", "mango"),
    ("use password mango for the guest account", "mango"),
    ("Try password mango if the other one fails.", "mango"),
]


@pytest.mark.parametrize("text, secret", USED_WORD, ids=[f"used_word{i}" for i in range(len(USED_WORD))])
def test_a_word_used_as_the_password_mid_sentence_is_redacted(text, secret):
    assert [f.kind for f in find_secrets(text)] == ["password_in_prose"], find_secrets(text)
    assert secret not in write_gate.redact(text)


NOT_USED_WORD = [
    "the meeting ran long and I was excited",
    "she is spelling it out",
    "the password reset link expired",
    "use the password manager",
    "I forgot my password again",
    "password must be 12 characters",
    "Enter password below.",
    "Type password and press enter.",
    "Use password authentication for the API.",
    "Protect the archive with password encryption for transfer.",
    "Set the password to expire tomorrow for the contractors.",
    "I set the password policy yesterday.",
]


@pytest.mark.parametrize("text", NOT_USED_WORD, ids=[f"not_used_word{i}" for i in range(len(NOT_USED_WORD))])
def test_prose_using_the_word_password_names_no_secret(text):
    assert find_secrets(text) == [], find_secrets(text)


# --- the quarantine preview keeps none of them ---------------------------------------------------------------------

PREVIEWS = [
    ("Good to know: swordfish is my password for the router.", "swordfish"),
    ("Visitors should enter 4821 on the keypad at the side door.", "4821"),
    ("Q: what's the wifi password? A: tr0ub4dor&3", "tr0ub4dor&3"),
    ("Für den Router gilt: mein Passwort ist Schwertfisch.", "Schwertfisch"),
    ("Recuerda: mi contraseña es girasol.", "girasol"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("answer, secret", PREVIEWS, ids=[f"preview{i}" for i in range(len(PREVIEWS))])
def test_the_quarantine_preview_redacts_the_new_forms(api, answer, secret):
    body = _observe(api, answer)
    assert body["decision"] == "blocked" and body["evidence"]["reason"] == "secret", body
    item = MemoryQuarantine.objects.get(user_id="alice")
    assert "[REDACTED:" in item.redacted_preview, item.redacted_preview
    _nothing_kept([secret])


# --- the gate reads a long text in linear time ------------------------------------------------------------------

# Texts reach the gate up to 20,000 characters (extraction runs it on whole messages). Runs of whitespace or of a
# repeated phrase after each rule's keywords: where two quantifiers can take the same characters, a pattern backtracks
# N^2 or N^3 steps ("what is the password" + 2,000 spaces took 32 s in detect-secrets' IBM Cloud pattern).
_N = 5_000
ADVERSARIAL = [
    ("ask_for", lambda n: "Ask the agent: what is the password for" + " " * n + "x"),
    ("ask_for_tabs", lambda n: "Q: what is the password for the VPN" + " \t" * (n // 2) + "x"),
    ("what_is_the_password", lambda n: "what is the password" + " " * n + "x"),
    ("what_is_the_password_newlines", lambda n: "what is the password" + "\n" * n + "x"),
    ("password_for", lambda n: "password for" + " " * n + "x"),
    ("pin", lambda n: "pin" + " " * n + "x"),
    ("PIN_tabs", lambda n: "use PIN" + "\t" * n + "#"),
    ("gate_code", lambda n: "gate code" + " " * n + "x"),
    ("mi_contrasena_es", lambda n: "mi contraseña es" + " " * n + "x"),
    ("password_es_colon", lambda n: "la password es" + " " * n + ":"),
    ("passwort_colon", lambda n: "Passwort" + " \n" * (n // 2) + ":"),
    ("my_password_is", lambda n: "my password is" + " " * n + "x"),
    ("password_set_to", lambda n: "the root password was set to" + "\t" * n + "x"),
    ("username", lambda n: "username" + " " * n + "x"),
    ("login_newlines", lambda n: "login" + "\n" * n + "x"),
    ("password_dots", lambda n: "password" + "." * n),
    ("password_dashes", lambda n: "my password is " + "-" * n),
    ("flag_dashes", lambda n: "-" * n),
    ("a_space", lambda n: "a " * (n // 2)),
    ("a_tab", lambda n: "a\t" * (n // 2)),
    ("a_is_the", lambda n: "a is the " * (n // 9) + "password."),
    ("is_my_password", lambda n: "x is my password. " * (n // 18)),
    ("assignments_one_line", lambda n: "password = user_x; " * (n // 19)),
    ("assignments_lines", lambda n: "password = user_x\n" * (n // 18)),
    ("answers", lambda n: "wifi password? A: " * (n // 18)),
    ("keypad_enter", lambda n: "keypad enter " * (n // 13)),
    ("use_password", lambda n: "use password " * (n // 13)),
    ("password_for_words", lambda n: "swordfish is the password for" + " the" * (n // 4)),
    ("password_for_router", lambda n: "swordfish is the password for the router. " * (n // 42)),
    ("word_is_my_password", lambda n: "dragonfly is my password. " * (n // 26)),
    ("set_to_spaces", lambda n: "set the password to tulip" + " " * n + "yesterday"),
    ("senha_e", lambda n: "a senha e abacaxi " * (n // 18)),
    ("clave_es", lambda n: "mi clave es perro " * (n // 18)),
    ("passwords_one_clause", lambda n: "my password is hunter2x " * (n // 24)),
]


def _seconds(text: str) -> float:
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        find_secrets(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("make", [make for _, make in ADVERSARIAL], ids=[name for name, _ in ADVERSARIAL])
def test_the_gate_reads_an_adversarial_text_in_linear_time(make):
    """The gate's time on N and 4N characters (5,000 and 20,000, the longest text it is given): linear work grows 4x,
    quadratic 16x, cubic 64x; the bound is 8x. A ratio, not a wall-time cap: the project keeps speed targets out of
    timed tests, and a ratio of the same text at two sizes measured in the same test holds on a slow or loaded machine
    where an absolute cap would not. Each size is the best of three runs (a pause of the machine only lengthens a run),
    and 50 ms of slack keeps a text the gate reads in a few milliseconds from failing on noise: a superlinear term that
    small at 20,000 characters is harmless."""
    small, large = _seconds(make(_N)), _seconds(make(4 * _N))
    assert large < 8 * small + 0.05, f"{small:.4f}s at {_N}, {large:.4f}s at {4 * _N}"


def test_detect_secrets_assignment_patterns_find_the_same_without_backtracking():
    """detect-secrets' assignment patterns (IBM Cloud IAM, IBM COS HMAC, Cloudant, SoftLayer) rewritten with possessive
    spaces find what the originals find."""
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector

    names = ["ibm_cloud_iam_key", "iam-api-password", "ibm_cos_hmac_secret_access_key", "cloudant_password", "sl_api_key"]
    values = ["a" * 44, "A1b2-" * 8 + "_x9Z", "0f" * 24, "0123456789abcdef" * 4, "abcdefghijklmnopqrstuvwx"]
    operators = ["=", " = ", ":", " :  ", ":=", "=>", "::", " ", "   ", "= =", ": :", "", " =>  ", "=:"]
    texts = [f"{q}{n}{q}{op}{q}{v}{q}" for n in names for v in values for op in operators for q in ("", '"')]
    texts += [f"the {n}{op}{v}." for n in names for v in values for op in operators]
    patterns = [
        *IbmCloudIamDetector.denylist,
        *IbmCosHmacDetector.denylist,
        *CloudantDetector.denylist,
        *SoftlayerDetector.denylist,
    ]
    rewritten = 0
    for original in patterns:
        linear = rules.linear_assignment(original)
        rewritten += linear.pattern != original.pattern
        for text in texts:
            assert [m.span(1) for m in linear.finditer(text)] == [m.span(1) for m in original.finditer(text)], text
    assert rewritten == 5
