"""The write gate's former gaps: a plain-word password after a spaced flag in prose, a plain word set imperatively,
a door code or TOTP seed named by its context, 2FA recovery and backup codes, seed / unlock phrases and bare wallet
mnemonics, credentials told as a story. Each is blocked and redacted; the lessons about them still pass."""

import pytest

from memories import write_gate
from memories.secrets import find_secrets
from tests.conftest import observe_blocked

MNEMONIC = "abandon ability able about above absent absorb abstract absurd abuse access accident"

# (lesson, the secret that must not survive redact(), the finding kind)
BLOCKED = [
    # a plain word after a spaced password flag, on a command line or in prose
    ("Flush the cache with redis-cli -a hunter -h cache.internal FLUSHALL after deploys.", "hunter", "command_line_password"),
    ("Use redis-cli -a hunter to flush the cache on the staging box.", "hunter", "command_line_password"),
    ("Run `redis-cli --pass hunter` against the cache of the staging box.", "hunter", "command_line_password"),
    ("Run the importer with --password hunter and the admin user every night.", "hunter", "command_line_password"),
    ("Use sshpass -p hunter only in the lab, never in production scripts.", "hunter", "command_line_password"),
    ("Push images after docker login -u deploy -p hunter registry.example.com in the job.", "hunter", "command_line_password"),
    ("Sign the jar with jarsigner -storepass hunter app.jar release before uploading it.", "hunter", "command_line_password"),
    # a plain word set imperatively, a name with a digit used as the password
    ("Set the password to swordfish on the NAS web interface.", "swordfish", "password_in_prose"),
    ("Change the wifi password to bluebird before the guests arrive.", "bluebird", "password_in_prose"),
    ("Set the admin password to Swordfish.", "Swordfish", "password_in_prose"),
    ("Use hunter2 as the password for the NAS web interface.", "hunter2", "password_in_prose"),
    # a code or seed named by its context
    ("The code is 4829 for the front door of the office.", "4829", "access_code"),
    ("Our code is 482913 to get into the building on weekends.", "482913", "access_code"),
    ("Add JBSWY3DPEHPK3PXP to the authenticator app on the on-call phone.", "JBSWY3DPEHPK3PXP", "otp_seed"),
    ("Add JBSWY3DPEHPK3PXP to the app on the on-call phone.", "JBSWY3DPEHPK3PXP", "otp_seed"),
    ("Enter jbsw y3dp ehpk 3pxp into Google Authenticator when you set up the phone.", "y3dp ehpk", "otp_seed"),
    # 2FA recovery and backup codes
    ("My recovery codes are 8f3k-2j9d, 7h2m-4k8p and 3n5q-9w1z for the admin account.", "7h2m-4k8p", "recovery_code"),
    ("The backup code: 1234-5678 for the admin account of the billing app.", "1234-5678", "recovery_code"),
    ("The GitHub 2FA recovery code is a1b2c-3d4e5, keep it offline.", "a1b2c-3d4e5", "recovery_code"),
    ("The backup codes are 48291735 and 19283746 for the shared ops account.", "19283746", "recovery_code"),
    (
        "The BitLocker recovery key is 123456-234567-345678-456789-567890-678901-789012-890123 for the laptop.",
        "345678-456789",
        "recovery_code",
    ),
    # seed, recovery, unlock phrases and mnemonics
    ("The unlock phrase is open sesame for the laptop disk encryption.", "open sesame", "passphrase"),
    (f"The seed phrase is {MNEMONIC}.", "absorb abstract", "seed_phrase"),
    (
        "My wallet recovery phrase: 'zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo wrong' is in the drawer.",
        "zoo wrong",
        "seed_phrase",
    ),
    ("The mnemonic is legal winner thank year wave sausage worth useful, keep it offline.", "winner thank", "seed_phrase"),
    (f"Restore the wallet with {MNEMONIC} on the new phone.", "absorb abstract", "seed_phrase"),
    (f"{MNEMONIC}\nkeep these words for the hardware wallet.", "absorb abstract", "seed_phrase"),
    (f"{MNEMONIC.capitalize()} is what the old wallet showed.", "absorb abstract", "seed_phrase"),
    # credentials told as a story
    ("The admin logs in as admin with hunter2 on the staging console.", "hunter2", "credentials_in_prose"),
    ("Log in as root using password swordfish on the lab server.", "swordfish", "credentials_in_prose"),
    ("She signs in as deploy with the password Kx8mQ2zLp on the build box.", "Kx8mQ2zLp", "credentials_in_prose"),
    ("Log in as admin with admin on a fresh install of the router.", "with admin", "credentials_in_prose"),
    ("Log in to the console as admin with the password hunter for the lab.", "hunter", "credentials_in_prose"),
    # a plain word that only ends like an adverb, gerund or participle ("dragonfly", "darling": no English stem)
    ("Dragonfly is my password for the NAS web interface.", "Dragonfly", "password_in_prose"),
    ("Set the password to dragonfly on the NAS web interface.", "dragonfly", "password_in_prose"),
    (
        "Flush the cache with redis-cli -a butterfly -h cache.internal FLUSHALL after deploys.",
        "butterfly",
        "command_line_password",
    ),
    # a plain word in mid-sentence: set when, used after "password", the password for a device or an account
    ("I set the wifi password to tulip yesterday after the router was reset.", "tulip", "password_in_prose"),
    ("Use password mango for the guest account on the lab router.", "mango", "password_in_prose"),
    ("Log in with password mango on the lab router.", "mango", "password_in_prose"),
    ("Swordfish is the password for the router in the lab.", "Swordfish", "password_in_prose"),
    ("Swordfish is the password to the guest wifi in the office.", "Swordfish", "password_in_prose"),
    ("Tulip is the password for db01, keep it in the vault.", "Tulip", "password_in_prose"),
]


@pytest.mark.parametrize("text, secret, kind", BLOCKED, ids=[f"blocked{i}" for i in range(len(BLOCKED))])
def test_a_former_gap_is_blocked_and_redacted(text, secret, kind):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, (text, result)
    assert kind in result.kinds, result.kinds
    redacted = write_gate.redact(text)
    assert secret not in redacted and f"[REDACTED:{kind}]" in redacted, redacted
    assert not find_secrets(redacted), redacted


CLEAN = [
    # flags with no value, a word about the flag, a prompt flag followed by a database name
    "Use sshpass -p only in the lab, never in production scripts.",
    "The redis-cli -a option leaks the password into the process list.",
    "Pass --password twice and the client refuses to start.",
    "The --password flag of the importer is deprecated, use a file.",
    "Give redis-cli -a nothing and it asks for the password on the terminal.",
    "Run mysql -u root -p reports to open the database and type the password when asked.",
    "Run psql -U app --password reports to be asked for the password before connecting.",
    "Start docker login -p interactively only when the registry is down.",
    # set to / as
    "Set the password to expire.",
    "Set the password to persist across reboots of the appliance.",
    "Set the password to match the policy of the identity provider.",
    "Set the password to something long and random for every service account.",
    "Change the password to comply with the new policy before the audit.",
    "Use the password manager as the source of truth for every shared login.",
    "Use FIDO2 as the password replacement for every admin account.",
    "Use a long sentence as the password for the disk encryption.",
    "The password is emailed by HR on the first day.",
    # what happened to a password, as a support lesson tells it
    "My passcode was denied.",
    "The customer's password was rejected again after the update.",
    "my password was stolen, please help",
    "My password was compromised and I need a new one.",
    "The user said their password was hacked and locked.",
    "My passcode is blocked and I can't log in.",
    "My password was accidentally deleted from the keychain.",
    "The password was accepted on the second try.",
    "Her password is about to expire.",
    "The user's passcode is six digits long.",
    "The wifi password is case sensitive.",
    "Their password is fine, the issue is the 2FA device.",
    "The password is unknown to the support team.",
    "My password is outdated.",
    # codes
    "Error code 4829 means the door sensor is offline.",
    "The error code is 4829 for the door controller when it loses power.",
    "Zip code 94107 is the office in San Francisco.",
    "The code is 4829 when the disk of the node is full.",
    "The code is 200 for the door status endpoint of the access service.",
    "Add the TOTP seed to the authenticator app by scanning the QR code.",
    "Add ABCDEFGHIJKLMNOP to the allow list of the app.",
    "Add the ULID 01ARZ3NDEKTSV4RRFFQ69G5FAV to the app log for tracing.",
    "Add MYAPPLICATIONSETTING2 to the app config for the feature flag.",
    # recovery and backup codes
    "The recovery codes are in 1Password under the admin vault.",
    "The backup codes are shown once when 2FA is enabled for the account.",
    "The recovery code is 16 characters long and works only once.",
    "The backup code is in backup.py and runs every night on the replica.",
    "Backup codes: 10 per user, each usable once, regenerate them after use.",
    "The recovery key is stored in Azure AD for every managed laptop.",
    # phrases
    "The seed phrase is written on paper and kept in the safe.",
    "The recovery phrase is 24 words long and shown once by the wallet.",
    "The mnemonic is BIP39 compatible in every wallet we support.",
    "The unlock phrase is stored in the vault of the security team.",
    "Never type the seed phrase into a website, only into the hardware wallet.",
    "The seed words are twelve plain English words from a fixed list.",
    "The unlock phrase is the same as the disk password of the laptop.",
    "Tags: python django postgres redis celery docker kubernetes helm terraform ansible nginx.",
    # stories
    "The admin logs in as admin with SSO on the staging console.",
    "Log in as root using password authentication only on the lab server.",
    "Log in as admin with the password from the vault on the staging box.",
    "Log in as the deploy user with your SSH key, never with a password.",
    "Log in as admin with OAuth2 through the company identity provider.",
    "The service connects as app with a client certificate from the vault.",
    # a word after "password" that makes a term with it, a participle or a gerund, a saying about an abstract thing
    "Use password protection for the PDFs sent to customers.",
    "Use password rotation for every service account in the cluster.",
    "Use password login for the admins and SSO for everyone else.",
    "Log in with password or SSO on the customer portal.",
    "Enter password twice to confirm it on the signup form.",
    "Use the password grant for the CLI client only.",
    "Enclosed is the password for the router, in a sealed envelope.",
    "Patience is my password to success in this job.",
    "Kindness is the password to open any door in this team.",
    "Patience is the password to unlock your potential as an engineer.",
    "The meeting ran long and I was excited about the new password policy.",
    "The password was updated successfully.",
    "The password was emailed to the wrong address.",
    "Accounts with password expire after 90 days.",
    "Digite a senha e prossiga para a próxima etapa.",
    "The password was shared over the phone.",
    "The password is shared through 1password.",
    "The password was blocked for 24 hours.",
    "The user's password was rejected three times and the account got locked.",
    "The password was locked due to too many attempts.",
    "The password was recently rotated.",
    "My password is about eight characters.",
    "The password is 12 characters long.",
    "The password is easy to guess.",
    "The password is similar to the old one.",
    "The password is fake, it's a phishing page.",
    "The password was entered correctly.",
    "la clave es escalabilidad",
]

# A password that only looks like what the rules above let through: a name or a word shaped like a participle or an
# adverb, a state word that does not end its clause, a passphrase or seed phrase that starts with a common word, a
# rare word after someone's "clave", "my password for" something that is not a saying.
STILL_SECRETS = [
    "my password is molly",
    "my password is seed",
    "my password is jared",
    "my password is wicked",
    "my password is lovely",
    "my password is frozen",
    "the password is tiger numbers",
    "the passphrase is old man hard rain",
    "the passphrase is broken arrow sky blue",
    "my passphrase is new moon rising star",
    "the seed phrase is fine cabin wolf guitar sudden",
    "the seed phrase is about abandon ability able",
    "log in with user default and pass Kx8mQ2zLp9",
    "user old pass hunter2x",
    "password: simple",
    "db_password=secure",
    "redis-cli -a fine -h host",
    "log in as admin with password default",
    "mi clave es jaguar",
    "la clave del router es nectar",
    "minha chave é jaguar",
    "swordfish is my password for the university",
    "swordfish is my password for business",
    "swordfish is my password for life",
    # a description, then the password in the same sentence
    "my password was stolen on Monday, it was Kx8mQ2zLp9",
    "the password is fine, it's Kx8mQ2zLp9",
    "my password was stolen; it was Kx8mQ2zLp9",
    "my password is about 12 characters: Kx8mQ2zLp9",
    "my password was stolen, it was sunshine",
    "the password is temporary: Welcome1!",
    "the password is temporary until Friday: bluebird",
    "my passcode is six digits: 482913",
    "the password is case sensitive: Sunshine",
    "the wifi password is secure with wpa2, it's bluebird",
    # a passphrase that starts with a state word, a name ending in -ly before one
    "the passphrase is lost in translation",
    "the passphrase is good to go",
    "the passphrase is secure butterfly garden",
    "my password is dragonfly saved in chrome",
    "the wifi password is lily shared with guests",
]


@pytest.mark.parametrize("text", CLEAN, ids=[f"clean{i}" for i in range(len(CLEAN))])
def test_a_lesson_about_them_passes(text):
    result = write_gate.check(text)
    assert result.allowed, (text, result)


@pytest.mark.parametrize("text", STILL_SECRETS, ids=[f"still{i}" for i in range(len(STILL_SECRETS))])
def test_a_password_shaped_like_a_description_is_still_blocked(text):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, (text, result)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "answer, secret",
    [
        ("Use redis-cli -a hunter to flush the cache on the staging box.", "hunter"),
        ("Set the password to swordfish on the NAS web interface.", "swordfish"),
        ("My recovery codes are 8f3k-2j9d, 7h2m-4k8p and 3n5q-9w1z for the admin account.", "8f3k-2j9d"),
        (f"The seed phrase is {MNEMONIC}.", "absorb abstract"),
        ("The admin logs in as admin with hunter2 on the staging console.", "hunter2"),
    ],
)
def test_observe_quarantines_a_former_gap_with_it_redacted(answer, secret):
    observe_blocked(answer, secret)


@pytest.mark.parametrize(
    "question, answer, secret",
    [
        ("What's the admin password for staging?", "Hunter2Staging!9", "Hunter2Staging!9"),
        (
            "Which password do I use for the staging admin console?",
            "Use Hunter2Staging!9 when the console asks.",
            "Hunter2Staging!9",
        ),
        ("What is the wifi password at the office?", "bluebird42 is the one for the main floor network.", "bluebird42"),
        ("What's the PIN for the office alarm?", "482913, enter it within thirty seconds of opening the door.", "482913"),
        ("What's the PIN for the office alarm?", "It's 4829 then press enter on the keypad by the door.", "4829"),
        # a question that only names what it asks for, or asks it politely
        ("Staging admin password?", "Hunter2Staging!9, and change it after the demo.", "Hunter2Staging!9"),
        ("Wifi password for the guest network?", "bluebirdnest", "bluebirdnest"),
        ("Do you know the wifi password?", "It is 'sunshine' on every floor of the office.", "sunshine"),
        ("Can you tell me the safe combination?", "It's 12 34 56, turn the dial left first.", "12 34 56"),
        # a password without digits
        ("What's the wifi password?", "swordfish", "swordfish"),
        ("What's the wifi password?", "It's swordfish.", "swordfish"),
        ("What is the wifi password at the office?", "The guest one is guestnetwork, all lowercase.", "guestnetwork"),
        # a common word that ends the answer's "it is" / "the password is" clause
        ("What's the wifi password?", "It is dragon, all lowercase.", "dragon"),
        ("What's the wifi password?", "The password is dragon, ask Bob before you change it.", "dragon"),
        ("Do you know the wifi password?", "The wifi password: dragon.", "dragon"),
        ("What's the wifi password?", "Sure, it's dragon, all lowercase.", "dragon"),
        ("What's the wifi password?", "It's dragon (all lowercase).", "dragon"),
        ("What's the wifi password?", "Yes! It is dragon, with a capital D.", "dragon"),
        ("What's the wifi password?", "Sure, swordfish.", "swordfish"),
        # a code with separators
        ("What's the door code?", "12-34-56 then the green button on the left.", "12-34-56"),
        ("What's the alarm code?", "*4829# on the panel by the back door.", "*4829#"),
    ],
)
def test_a_secret_asked_for_in_the_question_and_given_in_the_answer_is_quarantined_and_redacted(db, question, answer, secret):
    """The word that names it is in the question, the value alone in the answer: neither the lesson ("Q: ... A: ...")
    nor the answer kept alone, nor the quarantine's preview, nor a retrieve holds it."""
    from memories.models import Memory, MemoryQuarantine
    from tests.conftest import OBSERVE, RETRIEVE, make_client

    client = make_client(["resolve", "feedback"], name="obs")
    r = client.post(OBSERVE, {"user_id": "alice", "user_message": question, "assistant_message": answer}, format="json")
    body = r.json()
    assert r.status_code == 200 and body["decision"] == "blocked" and body["evidence"]["reason"] == "secret", body
    assert secret not in r.content.decode() and not Memory.objects.exists()
    item = MemoryQuarantine.objects.get(user_id="alice")
    assert secret not in item.redacted_preview and secret not in item.topic and "[REDACTED:" in item.redacted_preview
    block = client.post(RETRIEVE, {"user_id": "alice", "query": question}, format="json").json()["block"]
    assert secret not in block


@pytest.mark.parametrize(
    "question, answer",
    [
        ("How do I reset my password?", "Open Settings, then Security, and click Reset; it works on v2.3.1 with Python3 too."),
        ("Which token format does the API use?", "JWT signed with RS256 and valid for 3600 seconds, as RFC7519 describes."),
        ("What is the password policy here?", "At least 12 characters with one digit, rotated every 90 days by the vault."),
        ("What is the token lifetime for the api?", "Tokens expire after 3600 seconds since the 2024 release of the gateway."),
        ("What are pins used for in pytest?", "Pin with pytest==8.2 in requirements2.txt for the nightly builds."),
        ("Which tokens does the tokenizer produce for code?", "It uses cl100k_base with about 100k entries in all."),
        ("What is the combination of flags for gzip?", "Use -9 -k with gzip1.12 or newer on the build hosts."),
        ("What are the requirements for a PIN?", "Six digits, never 000000 or 123456, changed every year."),
        ("Which credentials does the nightly job use?", "The role arn:aws:iam::123456789012:role/nightly2 from the vault."),
        ("How do I change password?", "Open Settings and pick Security, then Change."),
        ("Is there a wifi password?", "No, the guest network is open."),
        ("What's the wifi password?", "It is printed on the router label."),
        ("What's the wifi password?", "The password is rotated."),
        ("What's the wifi password?", "The password is hashed with bcrypt."),
        ("What's the wifi password?", "It is in 1Password under 'Office'."),
        ("What's the PIN?", "It is on the card sleeve, call 555-1234 if lost."),
        ("What's the staging password?", "Same as prod."),
        ("What is the wifi password?", "Ask Bob; he changed it last week."),
        ("Staging token?", "Use the one in the CI secrets."),
        ("Which password should I use for the test account?", "Any password works on the test account."),
        ("What's the door code?", "The code changes every week."),
        ("What's the password for the staging DB?", "Rotated."),
        ("What's the password for the staging DB?", "Unchanged."),
        ("Password for the staging DB?", "Required."),
        ("Which token do I pass to the API?", "Bearer."),
        ("Do you know where the VPN credentials are?", "Bitwarden."),
        ("Do you know which secret the webhook uses?", "It is WEBHOOK_SECRET."),
        ("What's the door code?", "Door code is on page 12-14 of the handbook."),
        # a word that says something of the password, not the password
        ("What's the wifi password?", "It is long, at least 16 characters."),
        ("What's the wifi password?", "That is correct."),
        ("What's the wifi password?", "It is there, on the fridge."),
        ("What's the wifi password?", "The password is confidential, ask IT."),
        ("What's the wifi password?", "Use caution, it changes weekly."),
        ("What's the wifi password?", "It is Bob's, ask him."),
        ("What's the wifi password?", "That's strange, it worked yesterday."),
        ("What's the wifi password?", "It's hidden, ask reception."),
        ("What's the wifi password?", "It's broken, use ethernet."),
        ("What's the wifi password?", "It's case-sensitive, so be careful."),
        ("What's the wifi password?", "It's passwordless, just connect."),
        ("What's the wifi password?", "It is somewhere, ask Bob."),
        ("What's the wifi password?", "Sure, ask Bob."),
    ],
)
def test_a_question_about_passwords_or_tokens_keeps_its_answer(question, answer):
    from memories import write_gate

    assert write_gate.answered_secrets(question, answer) == []


@pytest.mark.parametrize(
    "text, secret",
    [
        ("Log in to staging with admin / Hunter2Staging!9 from the VPN.", "Hunter2Staging!9"),
        ("admin:Hunter2Staging!9 is what the staging console accepts.", "Hunter2Staging!9"),
        ("Our SMTP relay login is smtp-user with secret Zq8xW3vP9kLm on port 587.", "Zq8xW3vP9kLm"),
        ("Use admin:Kx8vQ2mZpL/9 on the staging console only.", "Kx8vQ2mZpL/9"),
    ],
)
def test_a_credential_pair_or_secret_in_prose_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.kinds == ["credentials_in_prose"], result
    assert secret not in write_gate.redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "Log in with SSO and pick the staging account from the list.",
        "Use the python:3.12-slim image and pin sha256:abc123def456 in the Dockerfile.",
        "The root:wheel ownership is needed on /etc/sudoers for sudo to work.",
        "Connect using password authentication only when keys fail on the bastion host.",
        "Run the job as user:group deploy:deploy with umask 022 always.",
        "Set the owner to root:root and mode 0600 on the key file.",
        "root:x:0:0:root:/root:/bin/bash is the first line of the passwd file.",
        "Pull jenkins:lts-jdk17 and ubuntu:jammy20240227 images before the build.",
        "Use postgres:16-alpine3.19 and svc-payments:2024r3 images in staging.",
        "Call api:v2beta1 and service:v1alpha1 resources in the cluster.",
        "Bind system:node:ip-10-0-1-5 and system:serviceaccount:default:builder roles.",
        "Run npm run test:unit2 and test:e2e2 before pushing any branch.",
        "Grant sa:ReadOnly2 to the reporting service account only.",
        "Connect with redis:6379 and db:5432 from the app containers.",
        "Connect with mongo:27017/app2 for the reporting jobs.",
        "Log in with Google/GitHub on the staging portal.",
        "Authenticate with OIDC/SAML against the company directory.",
        "Login with admin/admin is disabled on every production box.",
        "Connect as cluster-admin/system:masters only in emergencies.",
    ],
)
def test_a_lesson_about_accounts_and_logins_passes(text):
    assert write_gate.check(text).allowed, write_gate.check(text)


@pytest.mark.parametrize(
    "alone",
    [
        "the passphrase is correct horse battery staple@Kx8mQ2zLp9.io",
        "the passphrase is correct horse battery staple and the pin is 4821, or Kx8mQ2zLp9",
    ],
)
def test_a_clause_after_another_finding_gives_the_same_values_as_alone(alone):
    """A sentence's findings are read once for all of them: what a finding's clause holds does not depend on another
    finding before it (a finding that ends inside a token still reads the token's rest)."""
    from memories.secrets import find_secrets

    before = "my password is hunter2x and "
    spans = {(f.kind, alone[f.start : f.end]) for f in find_secrets(alone)}
    after = {(f.kind, (before + alone)[f.start : f.end]) for f in find_secrets(before + alone) if f.start >= len(before)}
    assert spans and after == spans
