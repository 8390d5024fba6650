"""The write gate blocks credentials given as command-line flags ("curl -u user:pass", "mysql -p<pw>",
"docker login -p <pw>", "--token <x>", ...) and "the credentials are user/password" in prose, quarantines
them with the password redacted, and lets lessons that only talk about the flags through."""

import pytest

from memories import write_gate
from tests.conftest import observe_blocked

PW = "Xk9mPq2vL8zR4tW"

# (lesson, the secret that must not survive, the finding kind)
CLI_SECRETS = [
    (
        f"Call the internal reports api with curl -u admin:{PW} https://internal.example.com/api/reports.",
        PW,
        "command_line_password",
    ),
    (f"Fetch the report with curl --user admin:{PW} https://internal.example.com/api/reports.", PW, "command_line_password"),
    (f"Fetch the report with curl -s --user=admin:{PW} https://internal.example.com/api/reports.", PW, "command_line_password"),
    (
        "Run curl -u 'admin:hunter 2x' https://reports.example.com/api when testing the report export.",
        "hunter 2x",
        "command_line_password",
    ),
    (
        f"Go through the proxy with curl -U proxyuser:{PW} -x proxy.internal:3128 https://example.com.",
        PW,
        "command_line_password",
    ),
    (f"Push images after docker login -u deploy -p {PW} registry.example.com in the release job.", PW, "command_line_password"),
    (f"Push images after docker login -u deploy --password {PW} registry.example.com in the job.", PW, "command_line_password"),
    (
        "Push images after docker login -u deploy -phunter2x registry.example.com in the release job.",
        "hunter2x",
        "command_line_password",
    ),
    ("Use podman login --password=s3cr3t-pw -u deploy quay.io to pull the private images.", "s3cr3t-pw", "command_line_password"),
    (f"Run the migrations with mysql -u root -p{PW} -h db.internal before deploying the app.", PW, "command_line_password"),
    (
        "Take backups with mysqldump -uroot -phunter2x reports > dump.sql every night on the replica.",
        "hunter2x",
        "command_line_password",
    ),
    ("Reset the replica with mysql -u root -proot -h db.internal when the lag alarm fires.", "-proot", "command_line_password"),
    (f"Run the migrations with mysql --password={PW} -u root before deploying the app.", PW, None),
    ("Run the migrations with mysql -u root --password=hunter2x before deploying the app.", "hunter2x", None),
    (f"Connect with PGPASSWORD={PW} psql -h db.internal -U app reports to check the numbers.", PW, None),
    ("Connect with PGPASSWORD='hunter2x' psql -h db.internal -U app reports to check them.", "hunter2x", None),
    (f"Flush the cache with redis-cli -a {PW} -h cache.internal FLUSHALL after deploys.", PW, "command_line_password"),
    (
        "Script the cache flush with REDISCLI_AUTH=s3cr3t-pw redis-cli -h cache.internal FLUSHALL.",
        "s3cr3t-pw",
        "command_line_password",
    ),
    (f"Copy the files with sshpass -p {PW} scp build.tar deploy@host:/srv in the job.", PW, "command_line_password"),
    ("Copy the build with: sshpass -p secret scp build.tar deploy@host:/srv", "secret", "command_line_password"),
    ("Run `sshpass -p hunter ssh deploy@bastion` to reach the bastion box.", "hunter", "command_line_password"),
    ("Reach the lab box with sshpass -p ubuntu ssh -o StrictHostKeyChecking=no ubuntu@lab", "-p ubuntu", "command_line_password"),
    ("The default login is admin/admin on a fresh install; change it right away.", "admin/admin", "credentials_in_prose"),
    ("The router login is root/root until someone changes it.", "root/root", "credentials_in_prose"),
    (
        "Copy the files with sshpass -phunter2x ssh deploy@bastion uptime on the bastion host.",
        "hunter2x",
        "command_line_password",
    ),
    (f"Use SSHPASS={PW} sshpass -e ssh deploy@bastion for the nightly sync job.", PW, "command_line_password"),
    (f"List the share with smbclient -U admin%{PW} //fileserver/share before copying.", PW, "command_line_password"),
    (f"Create the user with htpasswd -b /etc/nginx/.htpasswd admin {PW} on the proxy.", PW, "command_line_password"),
    (f"Print the entry with htpasswd -nbB admin {PW} and paste it into the ingress secret.", PW, "command_line_password"),
    (
        f"Encrypt the export with openssl enc -aes-256-cbc -pass pass:{PW} -in export.csv for the vendor.",
        PW,
        "command_line_password",
    ),
    (f"Sign the jar with jarsigner -storepass {PW} app.jar release before uploading it.", PW, "command_line_password"),
    (f"Run the importer with --pass {PW} and the admin user every night on the box.", PW, "command_line_password"),
    (
        "Run the importer with --db-password hunter2x and the admin user every night on the box.",
        "hunter2x",
        "command_line_password",
    ),
    (f"Deploy with ./deploy.sh --token {PW} --env prod from the release box.", PW, "command_line_token"),
    (f"Deploy with ./deploy.sh --api-key={PW} --env prod from the release box.", PW, None),
    (f"Log in with vault login --secret {PW} before reading the kv store for the app.", PW, "command_line_token"),
    (f"The staging credentials are admin/{PW} for the reports dashboard login page.", PW, "credentials_in_prose"),
    ("The credentials: admin / hunter2x for the reports dashboard login page.", "hunter2x", "credentials_in_prose"),
    ("Credentials for the staging db are root:hunter2x on port 5432 of the replica.", "hunter2x", "credentials_in_prose"),
    ("The shared credentials are Winter2024x for the kiosk accounts in the lobby.", "Winter2024x", "credentials_in_prose"),
    ("For the staging box the password is hunter2x, use it for the admin account.", "hunter2x", "password_in_prose"),
]


@pytest.mark.parametrize("text, secret, kind", CLI_SECRETS, ids=[f"cli{i}" for i in range(len(CLI_SECRETS))])
def test_command_line_credentials_are_blocked_as_secrets_and_redacted(text, secret, kind):
    result = write_gate.check(text)
    assert not result.allowed and result.reason == write_gate.SECRET, (text, result)
    if kind is not None:
        assert kind in result.kinds, result.kinds
    redacted = write_gate.redact(text)
    assert secret not in redacted and "[REDACTED:" in redacted, redacted


def test_a_command_line_password_is_redacted_alone_and_a_user_password_pair_whole():
    assert write_gate.redact(f"docker login -u deploy -p {PW} registry.example.com") == (
        "docker login -u deploy -p [REDACTED:command_line_password] registry.example.com"
    )
    assert write_gate.redact(f"mysql -u root -p{PW} -h db") == "mysql -u root -p[REDACTED:command_line_password] -h db"
    assert write_gate.redact(f"curl -u admin:{PW} https://x.example.com") == (
        "curl -u [REDACTED:command_line_password] https://x.example.com"
    )
    assert write_gate.redact(f"curl -u 'admin:{PW}' https://x.example.com") == (
        "curl -u '[REDACTED:command_line_password]' https://x.example.com"
    )
    assert (
        write_gate.redact(f"the credentials are admin/{PW} for it")
        == "the credentials are [REDACTED:credentials_in_prose] for it"
    )


# Lessons about the flags, without a value or with a placeholder: stored as usual.
CLI_CLEAN = [
    "curl -u is how you pass basic auth to the reports api.",
    "Use mysql -p and type the password when asked by the client.",
    "Run docker login -u deploy then enter the token when prompted.",
    "Set PGPASSWORD in the environment instead of passing it to psql.",
    "The redis-cli -a flag takes the password, so prefer REDISCLI_AUTH in scripts.",
    "Call the api with curl -u admin:<password> https://internal.example.com/api/reports.",
    'Call the api with curl -u "$API_USER:$API_PASSWORD" https://internal.example.com/api/reports.',
    'Call the api with curl -u "${API_USER}:${API_TOKEN}" https://internal.example.com/api/reports.',
    "Call the api with curl -u admin: https://internal.example.com/api/reports so curl prompts for it.",
    "With curl --user name:password the password ends up in the shell history.",
    "Use curl -u $(cat ~/.creds) https://api.example.com to keep it out of the history.",
    "Run the migrations with mysql -u root -p${DB_PASSWORD} -h db.internal before deploying.",
    "Run the migrations with mysql -u root -p$MYSQL_PASSWORD -h db.internal before deploying.",
    "Connect with mysql -u root -p -h db.internal reports and enter the password at the prompt.",
    "Run mysql -u root -p reports < dump.sql to restore the dump, then type the password.",
    "Run mysql -P 3306 -h db.internal -u app to reach the replica port.",
    "Run mysql --password=<password> -u root before deploying the app to production.",
    "Push images after docker login -u deploy -p *** registry.example.com in the release job.",
    "Use docker login -p $REGISTRY_PASSWORD -u deploy in CI, never a literal.",
    "Pipe the token into docker login --password-stdin -u deploy registry.example.com instead.",
    "Copy the build with sshpass -p xxx scp build.tar deploy@host:/srv in the job.",
    "The sshpass -p option is insecure; prefer sshpass -e with SSHPASS set.",
    "Use sshpass -f ~/.sshpass ssh host so the password comes from a file.",
    'Use redis-cli -a "$REDIS_PASSWORD" --no-auth-warning in the cron job.',
    "Use redis-cli -a $(cat /run/secrets/redis) --no-auth-warning in the probe.",
    "Use smbclient -U admin //fileserver/share and type the password when asked.",
    "Use smbclient -U 'DOMAIN\\user%<password>' when testing the share.",
    "Run smbclient -U guest% //fileserver/public for the guest share without a password.",
    "Create the file with htpasswd -c /etc/nginx/.htpasswd admin and type the password twice.",
    'Use htpasswd -nb admin "$ADMIN_PASSWORD" to print the line for the secret.',
    "Deploy with ./deploy.sh --token ${TOKEN} --env prod from the release box.",
    "The --token option takes a personal access token from the settings page.",
    "Use the --api-key flag or the API_KEY variable to authenticate the cli.",
    'Run the tool with --api-key "$API_KEY" so the key stays in the environment.',
    "Pass --password with no value and the client asks for it interactively.",
    "The `--password` flag of mysql leaks the password into ps output, so avoid it.",
    "Set the password with --password-file /run/secrets/db_password in the compose file.",
    "Run the deploy with --password /run/secrets/db_password so nothing is typed.",
    "Start the backup tool with --password ./secrets/backup.txt from the vault mount.",
    "Pass --token-file /var/run/secrets/token to the agent at start.",
    "Use sshpass -p secret only in the throwaway lab, the -p flag shows the password in ps.",
    "Use sshpass -p password ssh host only as a template for the real command.",
    "sshpass -p takes the password as an argument, so use sshpass -e in scripts.",
    "The credentials are user/user style placeholders in the examples.",
    "Run ansible-playbook site.yml --ask-pass --ask-become-pass to be prompted for both.",
    "Use gpg --batch --passphrase-file key.pass --decrypt backup.gpg in the restore job.",
    "Build with docker buildx build --secret id=npmrc,src=.npmrc . so the token stays out of layers.",
    "Use openssl enc -aes-256-cbc -pass env:ENC_PASS -in file to keep the password out of ps.",
    "Use openssl req -passout pass:<passphrase> only in throwaway test scripts.",
    "Run the container with docker run -u 1000:1000 -v /data:/data app so files stay owned.",
    "Run the tests with pytest -p no:cacheprovider to skip the cache plugin.",
    "Use git push -u origin main the first time you push a branch.",
    "Use psql -h db.internal -U app -W so psql prompts for the password.",
    "The credentials are stored in Vault under secret/reports for the team.",
    "The credentials are read/write for the reports team and read-only for others.",
    "The credentials are username/password pairs that come from the vault.",
    "The credentials are rotated every 90 days by the vault job.",
    "Credentials are in 1Password under the ops vault for the staging cluster.",
    "The login is handled by Keycloak for every internal dashboard.",
    "The credentials are user1/user2 style accounts created per team.",
    "User/password auth is disabled; use SSH keys for the bastion host.",
]


@pytest.mark.parametrize("text", CLI_CLEAN, ids=[f"clean{i}" for i in range(len(CLI_CLEAN))])
def test_lessons_about_credential_flags_without_a_literal_value_pass(text):
    result = write_gate.check(text)
    assert result.allowed, (text, result)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "answer",
    [
        f"Call the internal reports api with curl -u admin:{PW} https://internal.example.com/api/reports.",
        f"Push images after docker login -u deploy -p {PW} registry.example.com in the release job.",
        f"Run the migrations with mysql -u root -p{PW} -h db.internal before deploying the app.",
        f"Copy the files with sshpass -p {PW} scp build.tar deploy@host:/srv in the job.",
        f"The staging credentials are admin/{PW} for the reports dashboard login page.",
    ],
)
def test_observe_quarantines_a_command_line_password_with_it_redacted(answer):
    observe_blocked(answer, PW)
