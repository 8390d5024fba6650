"""The write gate blocks secrets written as prose: a bare "pw" name, a password named through a long qualifier,
credentials "stored as" a pair, a TOTP seed, "set the password to ...", a pre-shared key, "user admin pass ...", a
door / alarm / safe code; lessons that only talk about these things pass."""

import pytest

from memories import write_gate
from memories.secrets import find_secrets
from tests.conftest import observe_blocked

# (lesson, the secret that must not survive redact(), the finding kind)
BLOCKED = [
    ("Use pw=Kx8!mQ2zLp for the admin panel and change nothing without a ticket.", "Kx8!mQ2zLp", "credential_assignment"),
    ("Set db_pw: Kx8mQ2zLpW in the local settings of the reporting job.", "Kx8mQ2zLpW", "credential_assignment"),
    ("The admin panel pw is Kx8!mQ2zLp and nothing changes without a ticket.", "Kx8!mQ2zLp", "password_in_prose"),
    (
        "The master password of the team password manager is Kx8mQ2zLpW, never write it down.",
        "Kx8mQ2zLpW",
        "password_in_prose",
    ),
    (
        "The password for the admin account on the old NAS is Kx8mQ2zLp and nobody else knows it.",
        "Kx8mQ2zLp",
        "password_in_prose",
    ),
    (
        "The credentials are stored as admin:Kx8mQ2zLp on the old NAS web interface.",
        "Kx8mQ2zLp",
        "credentials_in_prose",
    ),
    ("The credentials were set to root/Kx8mQ2zLp9 when the box was built.", "Kx8mQ2zLp9", "credentials_in_prose"),
    ("The credentials are now stored as svc_app:Xk29dLq0pZ in the legacy config.", "Xk29dLq0pZ", "credentials_in_prose"),
    ("The TOTP seed for the admin account is JBSWY3DPEHPK3PXP, add it to the authenticator.", "JBSWY3DPEHPK3PXP", "otp_seed"),
    ("The 2FA setup key JBSWY3DPEHPK3PXP goes into the authenticator app of the on-call phone.", "JBSWY3DPEHPK3PXP", "otp_seed"),
    ("The MFA secret for the root account: gezdgnbvgy3tqojq, keep it in the safe.", "gezdgnbvgy3tqojq", "otp_seed"),
    ("Add the authenticator key jbsw y3dp ehpk 3pxp to the phone of the on-call person.", "y3dp ehpk", "otp_seed"),
    ("Set the password to Kx8mQ2zLpW on the NAS web interface whenever it is reset.", "Kx8mQ2zLpW", "password_in_prose"),
    ("Change the admin password for the billing app to 'Winter 2024!' after the audit.", "Winter 2024!", "password_in_prose"),
    ("Set the PIN to 4829 on the new phones of the sales team.", "4829", "password_in_prose"),
    ("The password has been set to Kx8mQ2zLp for the NAS web interface by the ops team.", "Kx8mQ2zLp", "password_in_prose"),
    ("Use Kx8mQ2zLp as the password for the NAS web interface in the lab.", "Kx8mQ2zLp", "password_in_prose"),
    (
        "Log into the NAS web interface using admin and Kx8mQ2zLp as the credentials.",
        "Kx8mQ2zLp",
        "credentials_in_prose",
    ),
    ("The admin password, Kx8mQ2zLp, must be rotated every quarter by the ops team.", "Kx8mQ2zLp", "password_in_prose"),
    ("The pre-shared key is Kx8mQ2zLpW for the IPsec tunnel to the branch office.", "Kx8mQ2zLpW", "password_in_prose"),
    ("The VPN PSK is Xk29dLq0Pz8sWm4n when setting up new laptops in the office.", "Xk29dLq0Pz8sWm4n", "password_in_prose"),
    ("Set wpa_psk=Kx8mQ2zLpW in the supplicant config of the kiosk.", "Kx8mQ2zLpW", "credential_assignment"),
    ("The Wi-Fi key is Kx8mQ2zLpW for the guest network on the second floor.", "Kx8mQ2zLpW", "password_in_prose"),
    ("Remember: user admin pass Kx8mQ2zLpW for the NAS web interface on port 5000.", "Kx8mQ2zLpW", "credentials_in_prose"),
    ("The lab router takes user admin / pass admin until someone changes it.", "pass admin", "credentials_in_prose"),
    ("The admin panel pass is Kx8!mQ2zLp and nothing changes without a ticket.", "Kx8!mQ2zLp", "password_in_prose"),
    ("The alarm code is 4829, enter it within thirty seconds of arriving.", "4829", "access_code"),
    ("The alarm code for the office is 4829, enter it within thirty seconds.", "4829", "access_code"),
    ("The door code for the lab is 482913 and it changes every month.", "482913", "access_code"),
    ("The combination for the safe in the server room is 12-34-56, only for managers.", "12-34-56", "access_code"),
    ("Set the alarm code to 4829 before leaving the office at night.", "4829", "access_code"),
    ("The building access code is 55123 on weekends for the whole team.", "55123", "access_code"),
]


@pytest.mark.parametrize("text, secret, kind", BLOCKED, ids=[f"blocked{i}" for i in range(len(BLOCKED))])
def test_a_secret_in_prose_is_blocked_and_redacted(text, secret, kind):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, (text, result)
    assert kind in result.kinds, result.kinds
    redacted = write_gate.redact(text)
    assert secret not in redacted and f"[REDACTED:{kind}]" in redacted, redacted
    assert not find_secrets(redacted), redacted  # the marker itself is not read as a secret


CLEAN = [
    "Set the password to expire every 90 days for every staff account.",
    "The password was set to expire after ninety days for the contractors.",
    "Set the password to at least twelve characters for every admin account.",
    "Change your password to something you can remember but nobody can guess.",
    "Set the password to $DB_PASSWORD in the compose file, never a literal.",
    "Set the password to a UUID4 for every service account in the cluster.",
    "The pw field is required on the login form of the admin panel.",
    "Set pw_min_length=12 in the auth config of the identity service.",
    "The pw_hash=bcrypt setting is the default in the app settings.",
    "The password of the team password manager is generated and never typed.",
    "The password for every service account in the staging cluster is rotated by Vault.",
    "The password for new hires is emailed by HR on their first day.",
    "The password for the wifi is posted on the wall in the kitchen.",
    "The password for the app. It is fine to share the link with the team.",
    "The password is base64 encoded in the kubernetes secret of the app.",
    "The password (hashed with bcrypt) must never be logged anywhere.",
    "Use sha256 as the password hash only for the legacy systems.",
    "Use Okta-SSO as the login, never local accounts on the dashboards.",
    "The password, OAuth2, and SAML logins are all supported on the portal.",
    "The credentials are stored as base64 in the secret manifest of the app.",
    "The credentials are stored as env vars in the deployment of the worker.",
    "The credentials are stored as user:password pairs in the file.",
    "The credentials are set to rotate every 30 days by the vault job.",
    "The username field and password field must both be filled in.",
    "Pipe the token into docker login --password-stdin -u deploy registry.example.com instead.",
    "The login admin pass-through is configured at the proxy for the dashboards.",
    "The first pass is O(n) and the second pass is twice as fast.",
    "The boarding pass is in the wallet app of the travel phone.",
    "The TOTP seed is shown once as a QR code during enrolment.",
    "The TOTP seed is base32 encoded and at least 16 characters long.",
    "The 2FA secret key is shown as a QR code and as text to the user.",
    "The TOTP key is also kept with care in the vault of the team.",
    "The OTP key is AUTHENTICATIONKEY in the config schema of the service.",
    "The pre-shared key is rotated monthly by the network team for every site.",
    "The pre-shared key for the VPN tunnel is generated by the firewall.",
    "The PSK is shared with the vendor through the portal once a year.",
    "The PSK is WPA2 only on the old access points in the warehouse.",
    "The alarm code is in the vault, ask security for access.",
    "Error code 4829 means the disk is full on the storage node.",
    "The error code is 4829 when the disk of the node is full.",
    "The zip code is 94107 for the office in San Francisco.",
    "The status code is 4040 when the gateway of the mock fails.",
    "The door code is 4 digits long and changes every month.",
    "The code of the lock is 1984 lines in the firmware repository.",
    "The safe combination is known only to the managers of the site.",
    "The access code is sent by SMS to the visitor before the meeting.",
]


@pytest.mark.parametrize("text", CLEAN, ids=[f"clean{i}" for i in range(len(CLEAN))])
def test_a_lesson_about_these_secrets_passes(text):
    result = write_gate.check(text)
    assert result.allowed, (text, result)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "answer, secret",
    [
        ("Use pw=Kx8!mQ2zLp for the admin panel and change nothing without a ticket.", "Kx8!mQ2zLp"),
        ("The TOTP seed for the shared ops account is JBSWY3DPEHPK3PXP, add it to the authenticator app.", "JBSWY3DPEHPK3PXP"),
        ("The credentials are stored as admin:Kx8mQ2zLp on the old NAS web interface.", "Kx8mQ2zLp"),
        ("The alarm code for the office is 48291735, enter it within thirty seconds of arrival.", "48291735"),
    ],
)
def test_observe_quarantines_a_secret_in_prose_with_it_redacted(answer, secret):
    observe_blocked(answer, secret)
