"""The write-gate on a corpus: every secret blocked (and redacted), every clean lesson saved."""

import pytest

from memories import write_gate
from memories.models import Memory, MemoryQuarantine
from memories.simhash import hamming, simhash, simhash_hex

# (lesson, a substring that is the secret and must never be stored)
SECRETS = [
    (
        "To call the billing API use the key sk-proj-4fT9xQ2mLp8ZrW3vN6bY1cK7hJ0dS5aE in the Authorization header.",
        "4fT9xQ2mLp8ZrW3vN6bY1cK7hJ0dS5aE",
    ),
    (
        "The OpenAI fallback account uses sk-9sKd83JdlQpZmN20xLwq7RtYvB4cE1fG for batch jobs.",
        "sk-9sKd83JdlQpZmN20xLwq7RtYvB4cE1fG",
    ),
    (
        "Claude calls from the worker go out with sk-ant-api03-Zx8Lq2Wm9Rt4Yp7Kc1Vb6Nd3Hs5Jf0Ga-AbCd.",
        "sk-ant-api03-Zx8Lq2Wm9Rt4Yp7Kc1Vb6Nd3Hs5Jf0Ga",
    ),
    ("The S3 uploader authenticates with access key AKIAIOSFODNN7EXAMPLQ and the deploy role.", "AKIAIOSFODNN7EXAMPLQ"),
    ("Temporary credentials start with ASIAXYZ1234567890ABC and expire after the session ends.", "ASIAXYZ1234567890ABC"),
    (
        "Set aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY in the credentials file for the backup job.",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "Clone the private repo with the token ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5 as the password.",
        "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5",
    ),
    (
        "The release workflow uses github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz to push tags.",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    ),
    ("GitLab CI pulls the chart with glpat-xY7zQ2wE9rT4uI1oP6aS to authenticate.", "glpat-xY7zQ2wE9rT4uI1oP6aS"),
    (
        "Post alerts to Slack with the bot token xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUv from the ops workspace.",
        "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUv",
    ),
    (
        "The alert hook is https://hooks.slack.com/services/T0ABCDEF/B0GHIJKL/q1w2e3r4t5y6u7i8o9p0 and it posts to #ops.",
        "hooks.slack.com/services/T0ABCDEF/B0GHIJKL/q1w2e3r4t5y6u7i8o9p0",
    ),
    (
        "Payments in the sandbox go through sk_test_51HxYzAbCdEfGhIjKlMnOpQr and then we switch to live.",
        "sk_test_51HxYzAbCdEfGhIjKlMnOpQr",
    ),
    ("Production charges use sk_live_9aZ8bY7cX6dW5eV4fU3gT2hS in the payments service.", "sk_live_9aZ8bY7cX6dW5eV4fU3gT2hS"),
    (
        "Maps requests need the key AIzaSyD-1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVw appended to the URL.",
        "AIzaSyD-1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVw",
    ),
    (
        "Mail goes out through SendGrid with SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJ configured in the relay.",
        "SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJ",
    ),
    (
        "Publish the package with npm_aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2y after bumping the version.",
        "npm_aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2y",
    ),
    (
        "The test JWT eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk works against staging.",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    ),
    (
        "Call the internal API with the header Authorization: Bearer 7f3a9c2e1b8d4f6a0e5c3b9d7a1f2e4c8b6d0a3f.",
        "7f3a9c2e1b8d4f6a0e5c3b9d7a1f2e4c8b6d0a3f",
    ),
    (
        "The legacy proxy accepts Authorization: Basic YWRtaW46czNjcjN0UGFzcw== from the monitoring host.",
        "YWRtaW46czNjcjN0UGFzcw==",
    ),
    (
        "Deploy keys look like this one:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7Zq2xT9s\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END RSA PRIVATE KEY-----\nkeep it in the vault.",
        "MIIEowIBAAKCAQEA7Zq2xT9s",
    ),
    (
        "The SFTP host key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    ),
    (
        "Signing uses -----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC -----END PRIVATE KEY----- from the HSM export.",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    ),
    (
        "Release signing key: -----BEGIN PGP PRIVATE KEY BLOCK----- lQOYBF0xYz8BCAC9s -----END PGP PRIVATE KEY BLOCK-----",
        "lQOYBF0xYz8BCAC9s",
    ),
    ("Test the checkout with the card 4111 1111 1111 1111 and any future expiry date in the form.", "4111 1111 1111 1111"),
    ("The customer's card 5500-0000-0000-0004 was declined by the acquirer for an unknown reason.", "5500-0000-0000-0004"),
    ("Refund the payment made with card number 378282246310005 through the Amex portal.", "378282246310005"),
    ("Their corporate card is 6011111111111117, charge the renewal to it every year.", "6011111111111117"),
    ("For JCB testing enter 3530 1113 3330 0000 in the card field of the payment page.", "3530 1113 3330 0000"),
    (
        "Connect to the reporting database with postgres://report:S3cretPass!@db.internal:5432/reports from the BI host.",
        "S3cretPass!",
    ),
    ("The cache lives at redis://:r3d1sP4ss@cache.internal:6379/0 and holds the session keys.", "r3d1sP4ss"),
    ("Mongo replica: mongodb+srv://svc_app:Xk29dLq0pZ@cluster0.mongodb.net/app is the primary cluster.", "Xk29dLq0pZ"),
    ("Use amqp://guest:rabbitpw42@mq.internal:5672/ for the task broker in staging.", "rabbitpw42"),
    ("The FTP drop is ftp://upload:ftpSecret99@files.partner.com/incoming for nightly files.", "ftpSecret99"),
    (
        "SQL Server: Server=tcp:db.example.net;Database=crm;User Id=crm_app;Password=Winter2024!;Encrypt=true is the production string.",
        "Winter2024!",
    ),
    (
        "Blob storage uses DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=core.windows.net for uploads.",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==",
    ),
    ("In the .env file set DB_PASSWORD=tr0ub4dor&3 before starting the stack.", "tr0ub4dor&3"),
    ("The admin login is admin with password: CorrectHorse9 on the staging console.", "CorrectHorse9"),
    (
        "Configure the exporter with api_key=9f8e7d6c5b4a39281706f5e4d3c2b1a0 in the yaml file.",
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    ),
    ("Put client_secret: 'q8W2e4R6t8Y0u2I4o6P8' into the OAuth app settings of the portal.", "q8W2e4R6t8Y0u2I4o6P8"),
    (
        "The webhook signing secret = whsec_Ab12Cd34Ef56Gh78Ij90Kl12 and must be checked on every call.",
        "whsec_Ab12Cd34Ef56Gh78Ij90Kl12",
    ),
    (
        'Export the variable with export AUTH_TOKEN="c2VjcmV0LXRva2VuLXZhbHVlLTEyMw" before running the sync script.',
        "c2VjcmV0LXRva2VuLXZhbHVlLTEyMw",
    ),
    ('Use "password": "Sup3rS3cret#" in the JSON body when logging in to the vendor API.', "Sup3rS3cret#"),
    ("My password is hunter2, use it for the shared reporting account.", "hunter2"),
    ("The VPN password for the contractors is swordfish and it rotates quarterly.", "swordfish"),
    ("Remember that the wifi password is 'BlueSky-Office-77' for guests in the London office.", "BlueSky-Office-77"),
    ("The root passphrase was set to CorrectBatteryStaple42 when the server was built.", "CorrectBatteryStaple42"),
    ("Her banking app PIN is 4827 so she can approve transfers from the phone.", "4827"),
    ("The password for the reporting user is Qw3rty!2024 on the analytics cluster.", "Qw3rty!2024"),
    ("The api key is 8c1f4e2a9b7d3f6e0a5c2b8d4e1f7a3c and it goes in the x-api-key header.", "8c1f4e2a9b7d3f6e0a5c2b8d4e1f7a3c"),
    ("Log in to the router with passwd=R0uterAdm1n from the management VLAN only.", "R0uterAdm1n"),
    (
        "The Jenkins job reads secret_key := 'dj4ng0-s3cr3t-k3y-f0r-pr0d-x9z' from its environment.",
        "dj4ng0-s3cr3t-k3y-f0r-pr0d-x9z",
    ),
    ("Grafana admin: user admin, pwd = gr4fan4Adm!n, change it after the first login.", "gr4fan4Adm!n"),
    ("For mysql use mysql://root:toor1234@10.0.0.5:3306/shop when debugging the shop service.", "toor1234"),
    (
        "The refresh_token=1//0gAbCdEfGhIjKlMnOpQrStUvWxYz0123456789 lets the script renew its access.",
        "1//0gAbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ),
    ("Card on file for the vendor: 4012 8888 8888 1881, use it for the annual licence.", "4012 8888 8888 1881"),
]

CLEAN = [
    "Rotate the application logs with logrotate every night and keep fourteen compressed copies.",
    "Passwords must be at least twelve characters long and are stored hashed with bcrypt.",
    "The password is case-sensitive, so check caps lock before locking the account.",
    "Never put an API key in the repository; read it from the environment with os.environ.",
    "Read the database password from the DB_PASSWORD environment variable, never hard-code it.",
    "In settings use password=os.environ['DB_PASSWORD'] so the value stays out of the code.",
    "The connection string format is postgres://user:<password>@host:5432/db with the password from the vault.",
    "Connect to the local database with postgres://localhost:5432/app when running the tests.",
    "Tokens expire after one hour; refresh them with the refresh token flow before calling the API.",
    "Set the token_ttl to 3600 in the auth config to match the identity provider.",
    "The max_token_length setting caps prompt size; keep it at 512 for the small model.",
    "Use the Bearer scheme in the Authorization header for every call to the internal API.",
    "Card numbers are validated with the Luhn check before the payment form is submitted.",
    "A card number has between thirteen and nineteen digits and the first digits identify the network.",
    "Store only the last four digits of a card number and the card brand in the orders table.",
    "Private keys live in the HSM and are never exported; request signatures through the signing service.",
    "Generate SSH keys with ed25519 instead of RSA for new servers.",
    "Add your public key to the authorized_keys file of the deploy user to get access.",
    "Use `datetime.date.today()` in the report job rather than hard-coding the run date.",
    "Call `time.monotonic()` for timeouts so wall-clock changes do not break them.",
    "To reset a forgotten password, send the user through the self-service reset flow.",
    "When the password reset email does not arrive, check the spam folder and the mail relay queue.",
    "Always run the database migrations before deploying the web application.",
    "Prefer composition over inheritance for the payment provider adapters.",
    "Use UTC for every timestamp stored in the database and convert only for display.",
    "Pin the exact versions of build tools in the CI image so builds stay reproducible.",
    "Retry idempotent HTTP calls with exponential backoff and jitter, at most five times.",
    "The `$PATH` variable must include the virtualenv bin directory before running manage.py.",
    "Use the `$1` back-reference in the sed replacement to keep the first captured group.",
    "Our team decided to use PostgreSQL for every new service instead of MySQL.",
    "From now on, feature flags are removed within two sprints after a full rollout.",
    "To restore a backup: stop the app, run pg_restore with the dump, then start the app again.",
    "1. Drain the queue. 2. Stop the workers. 3. Deploy. 4. Start the workers again.",
    "Escape user input in SQL with query parameters, never with string formatting.",
    "Keep the secret key in the vault and inject it at deploy time through the environment.",
    "The webhook signature is an HMAC of the body; compare it with hmac.compare_digest.",
    "Use the read replica for reporting queries so the primary keeps serving writes.",
    "A 409 from the ledger service means a duplicate idempotency key; do not retry it.",
    "Create indexes concurrently on large tables so writes are not blocked during the build.",
    "Use pgvector's HNSW index with cosine distance for embedding search.",
    "Check the commit 3f2a1bc in the changelog when the date parser behaves differently.",
    "The default page size of the list endpoints is fifty and the maximum is two hundred.",
    "When the CSV import fails, check the file encoding first; most failures are Latin-1 files.",
    "Document every public API change in the changelog before merging the pull request.",
    "Wrap each service function in one transaction so partial writes never happen.",
    "Counters are updated with F expressions so concurrent requests do not lose increments.",
    "Use a unique constraint plus get_or_create to make the signup endpoint idempotent.",
    "The access key id identifies the AWS user; the secret part is never logged.",
    "Transfers above the daily limit need a second approver in the banking app.",
    "To block a lost card, freeze it in the app first and then order a replacement card.",
    "International transfers take one to three business days depending on the receiving bank.",
    "Exchange rates are fetched from the treasury service and cached for sixty seconds.",
    "A pending card payment disappears if the merchant never captures it within seven days.",
    "Top-ups by bank transfer need the reference code from the app to be matched automatically.",
    "Use the sandbox environment for card tests; it accepts the documented test numbers only.",
    "The PIN can be changed at any ATM of the network after the card is activated.",
    "An API key identifies the calling agent; scopes on the key decide which endpoints it may use.",
    "Set the auth header name in settings; the default is Authorization.",
    "Throttle retries at a rate of 5 per second per client to protect the ledger.",
    "Load balance the API across 3 replicas and drain one before each deploy.",
    # an amount after a comparison is a limit the user chose, not a price that moves
    "The user wants transfers above 1000 EUR confirmed by phone.",
    "Alert the user when card spending goes over £200 in a week.",
    "The user's daily ATM limit is 500 EUR.",
    "When AAPL closes above $190, alert the user.",
    "Transfers above 1000 EUR need a second signature.",
    "Withdrawals over 500 EUR go to manual review.",
    "Keep the user's monthly budget under $1,500.",
]

UNSTABLE = [
    "Today the staging cluster is down, use the backup cluster instead.",
    "Right now the deploy pipeline skips the integration tests because of flaky runners.",
    "The transfer fee is €2.50 per international payment for standard accounts.",
    "The premium plan costs $19.99 a month for individual customers.",
    "Her account balance is 1,240.50 after the last card payment went through.",
    "The outage started 3 days ago and the vendor has not fixed it yet.",
    "Next week the office moves to the new building on the river side.",
    "As of now the EUR to USD rate sits around 1.08 on the treasury screen.",
    "The premium plan costs more than $19.99 a month.",
    "The fee is over €2 for international payments.",
    "The user pays above 100 EUR for every transfer.",
    # a comparison in a clause that states no rule: an amount that moves
    "AAPL closed above $190 on the exchange.",
    "Gold trades above $2,000 an ounce.",
    "The user has over $10,000 in savings.",
    "The subscription is over $20 a month.",
    "Rent went up to $2,000 a month.",
    "The fee for v2.1 users is over €2.",
    # a rule word elsewhere in the sentence does not make a fact a limit
    "The user's account has over $10,000, so never suggest overdraft products.",
    "The user earns over $80,000 a year and wants to max out the 401k.",
    "Tesla stock is above $250 and the user always checks it.",
    "If the user asks, the flight to Paris was under $400.",
]

TOO_SHORT_OR_SPECIFIC = [
    "ok",
    "Use tabs.",
    "Order 58213347 ref 99120384",
    "Ticket OPS-48213 user 3f1c9a2e-7b4d-4e8a-9c1f-2d3e4f5a6b7c",
    "Contact jane.doe@example.com 10.20.30.40",
]


def test_corpus_sizes():
    assert len(SECRETS) >= 50 and len(CLEAN) >= 50


@pytest.mark.parametrize("text, secret", SECRETS, ids=[f"secret{i}" for i in range(len(SECRETS))])
def test_every_secret_is_blocked_and_redacted(text, secret):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, (text, result)
    redacted = write_gate.redact(text)
    assert secret not in redacted and "[REDACTED:" in redacted, redacted


@pytest.mark.parametrize("text", CLEAN, ids=[f"clean{i}" for i in range(len(CLEAN))])
def test_every_clean_lesson_passes(text):
    result = write_gate.check(text)
    assert result.allowed, (text, result)


@pytest.mark.parametrize("text", UNSTABLE)
def test_unstable_facts_are_blocked(text):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.UNSTABLE, result


@pytest.mark.parametrize("text", TOO_SHORT_OR_SPECIFIC)
def test_too_short_or_specific_is_blocked(text):
    result = write_gate.check(text)
    assert not result.allowed and result.reason in (write_gate.TOO_SHORT, write_gate.TOO_SPECIFIC), result


def test_luhn():
    assert write_gate.luhn_valid("4111111111111111")
    assert not write_gate.luhn_valid("4111111111111112")
    assert write_gate.check("Call the support line at 4111 1111 1111 1112 extension for card issues.").allowed


@pytest.mark.django_db
def test_corpus_through_the_api(api):
    """Secret-bearing lessons end in quarantine without the secret; clean lessons are saved."""
    for i, (text, secret) in enumerate(SECRETS):
        r = api.post(
            "/api/v1/memories/observe",
            {
                "user_id": "gate",
                "user_message": "Remember this for later.",
                "assistant_message": text,
                "meta": {"type": "pattern"},
            },
            format="json",
        )
        body = r.json()
        assert r.status_code == 200 and body["decision"] == "blocked", (i, text, body)
        assert secret not in r.content.decode()
    assert MemoryQuarantine.objects.filter(user_id="gate").count() == len(SECRETS)
    stored = " ".join(MemoryQuarantine.objects.values_list("redacted_preview", flat=True))
    for _, secret in SECRETS:
        assert secret not in stored
    assert not Memory.objects.filter(user_id="gate").exists()
    decisions = []
    for text in CLEAN:
        r = api.post(
            "/api/v1/memories/observe",
            {
                "user_id": "gate",
                "user_message": "Remember this for later.",
                "assistant_message": text,
                "meta": {"type": "pattern"},
            },
            format="json",
        )
        decisions.append(r.json()["decision"])
    assert "blocked" not in decisions
    assert Memory.objects.filter(user_id="gate").count() == decisions.count("saved") + decisions.count("new_version")
    assert decisions.count("saved") >= len(CLEAN) - 5  # a few clean lessons are near each other and merge


def test_simhash_properties():
    a = "Rotate the application logs with logrotate every night and keep fourteen compressed copies."
    assert len(simhash_hex(a)) == 16 and simhash_hex(a) == simhash_hex(a)
    assert hamming(simhash(a), simhash(a.upper() + "  ")) == 0
    assert hamming(simhash(a), simhash("Use UTC for every timestamp stored in the database.")) > 10
    assert hamming("0000000000000000", "000000000000000f") == 4


@pytest.mark.parametrize(
    "text",
    [
        "First stop the workers, then run the migration.",
        "first\nthen",
        "then first",
        "First drain the queue.\nThen restart it.",
        "at first it failed; then it worked",
        "firstly thenceforth",
        "first \r then",
        "",
    ],
)
def test_a_sequence_is_what_first_then_on_one_line_matched(text):
    import re

    from memories.extraction import _has_sequence

    assert _has_sequence(text) == bool(re.search(r"(?i)\bfirst\b.*\bthen\b", text))


def test_a_long_line_of_firsts_is_read_in_linear_time():
    """20,000 characters of "first " took 1.5 s of backtracking; a million now take a few milliseconds (a hang, not a
    timing, is what this guards against)."""
    from memories.extraction import _has_sequence, detect_type

    assert not _has_sequence("first " * 200_000)
    assert _has_sequence("first " * 200_000 + "then")
    assert detect_type("how?", "first " * 200_000) != "procedure"
