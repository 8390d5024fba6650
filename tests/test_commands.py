"""load_verbs, backfill_embeddings, create_agent_key, demo."""

import textwrap
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents.models import ApiKey
from common.text import text_hash
from embeddings.embedders import current_model_name, set_embedder
from learning.models import LearnedPhrase, Verb, VerbPhrase
from learning.services.phrases import learned_phrase_upsert
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

GOOD = """
verbs:
  - name: cbu.create
    display_name: Create a CBU
    description: Open a new client business unit.
    phrases: [create a cbu, open a new client business unit]
  - name: cbu.list
    phrases:
      - list all cbus
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_load_verbs_from_file(tmp_path):
    stdout = StringIO()
    call_command("load_verbs", str(write(tmp_path, "a.yaml", GOOD)), stdout=stdout)
    assert "verbs created: 2" in stdout.getvalue()
    verb = Verb.objects.get(name="cbu.create")
    assert verb.domain == "cbu" and verb.display_name == "Create a CBU"
    phrases = VerbPhrase.objects.filter(verb=verb)
    assert phrases.count() == 2
    assert all(p.embedding is not None and p.embedding_model == current_model_name() for p in phrases)
    # loading again is idempotent
    call_command("load_verbs", str(tmp_path / "a.yaml"), stdout=StringIO())
    assert VerbPhrase.objects.count() == 3


def test_load_verbs_embeds_in_batches_with_progress_and_keeps_a_failed_batch_for_the_backfill(tmp_path, settings, capsys):
    from embeddings.embedders import EmbeddingError, get_embedder

    real = get_embedder()

    class DownForOneBatch:
        model_name, dimension = real.model_name, real.dimension

        def embed_batch(self, texts):
            if "open a new client business unit" in texts:
                raise EmbeddingError("embedder down for this batch (test)")
            return real.embed_batch(texts)

        def embed(self, text):
            return self.embed_batch([text])[0]

    settings.LEARNING_IMPORT_BATCH_SIZE = 1
    set_embedder(DownForOneBatch())
    try:
        stderr = StringIO()
        call_command("load_verbs", str(write(tmp_path, "a.yaml", GOOD)), stdout=StringIO(), stderr=stderr)
    finally:
        set_embedder(None)
    assert "1 phrase(s) could not be embedded now" in stderr.getvalue()
    assert "embedding: 100%" in capsys.readouterr().err  # tqdm's bar, three phrases in batches of one
    vectors = dict(VerbPhrase.objects.values_list("normalized", "embedding_model"))
    assert vectors == {"create a cbu": real.model_name, "open a new client business unit": "", "list all cbus": real.model_name}


def test_load_verbs_from_directory(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yml", "- name: email.send\n  phrases: [send an email]\n")
    call_command("load_verbs", str(tmp_path), stdout=StringIO())
    assert set(Verb.objects.values_list("name", flat=True)) == {"cbu.create", "cbu.list", "email.send"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("verbs:\n  - name: Bad Name\n", "b.yaml:2"),
        ("verbs:\n  - name: cbu.x\n    phrases: nope\n", "'phrases' must be a list"),
        ("verbs:\n  - name: cbu.x\n    colour: red\n", "unknown key(s) colour"),
        ("verbs:\n  - name: cbu.x\n    phrases: ['']\n", "phrase 1 is empty"),
        ("verbs: [\n", "invalid YAML"),
        ("a: &a [1,2]\nb: *a\n", "aliases are not allowed"),
        ("just text", "expected a list of verbs"),
        ("verbs:\n  - name: cbu.create\n", "already defined"),
    ],
)
def test_bad_catalogue_loads_nothing_and_names_file_and_line(tmp_path, text, expected):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", text)
    with pytest.raises(CommandError) as exc:
        call_command("load_verbs", str(tmp_path), stdout=StringIO())
    assert expected in str(exc.value)
    assert "nothing loaded" in str(exc.value)
    assert Verb.objects.count() == 0


def test_load_verbs_missing_path(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        call_command("load_verbs", str(tmp_path / "missing.yaml"))


def _phrase_of_another_model(catalogue) -> LearnedPhrase:
    return LearnedPhrase.objects.create(
        phrase="old model",
        normalized="old model",
        verb=catalogue["cbu.list"],
        embedding=[0.1] * 384,
        embedding_model="some-other-model",
        embedding_hash=text_hash("old model"),
    )


def test_backfill_embeds_missing_and_stale_rows(catalogue, failing_embedder):
    learned_phrase_upsert(phrase="no vector yet", verb=catalogue["cbu.list"])
    set_embedder(None)
    stale_model = _phrase_of_another_model(catalogue)
    stale_text = LearnedPhrase.objects.create(
        phrase="edited text",
        normalized="edited text",
        verb=catalogue["cbu.list"],
        embedding=[0.1] * 384,
        embedding_model=current_model_name(),
        embedding_hash=text_hash("the text before the edit"),
    )
    stdout = StringIO()
    call_command("backfill_embeddings", "--no-progress", stdout=stdout)
    assert "embedded: 3, failed: 0" in stdout.getvalue()
    for row in LearnedPhrase.objects.all():
        assert row.embedding_model == current_model_name()
        assert row.embedding_hash == text_hash(row.normalized)
    stale_model.refresh_from_db()
    assert abs(stale_model.embedding[0] - 0.1) > 1e-6 or abs(stale_model.embedding[1] - 0.1) > 1e-6
    # nothing left: a second run is a no-op
    stdout = StringIO()
    call_command("backfill_embeddings", "--no-progress", stdout=stdout)
    assert "embedded: 0, failed: 0" in stdout.getvalue()
    assert stale_text.pk


class BrokenEmbedder:
    """The current model's name, and every call fails."""

    model_name = current_model_name()
    dimension = 384

    def embed(self, text):
        raise RuntimeError("boom")

    def embed_batch(self, texts):
        raise RuntimeError("boom")


def test_backfill_status_counts_what_waits_for_a_vector_and_embeds_nothing(catalogue):
    LearnedPhrase.objects.create(phrase="x y", normalized="x y", verb=catalogue["cbu.list"])
    _phrase_of_another_model(catalogue)
    stdout = StringIO()
    call_command("backfill_embeddings", "--status", stdout=stdout)
    out = stdout.getvalue()
    assert "learned phrases: 2 waiting" in out and f"total: 2 row(s) waiting for a vector of {current_model_name()}" in out
    assert LearnedPhrase.objects.filter(embedding__isnull=True).count() == 1  # counted, not embedded


def test_backfill_stops_with_a_message_when_the_embedder_stops_answering(catalogue):
    for i in range(3):
        LearnedPhrase.objects.create(phrase=f"row {i}", normalized=f"row {i}", verb=catalogue["cbu.list"])

    set_embedder(BrokenEmbedder())
    try:
        with pytest.raises(CommandError, match="stopped answering"):
            call_command("backfill_embeddings", "--no-progress", "--batch-size", "1", stdout=StringIO())
    finally:
        set_embedder(None)


def test_backfill_counts_failures_and_exits_non_zero(catalogue):
    LearnedPhrase.objects.create(phrase="x y", normalized="x y", verb=catalogue["cbu.list"])

    set_embedder(BrokenEmbedder())
    try:
        stdout = StringIO()
        with pytest.raises(CommandError, match="could not be embedded"):
            call_command("backfill_embeddings", "--no-progress", stdout=stdout)
        assert "failed: 1" in stdout.getvalue()
    finally:
        set_embedder(None)
    assert LearnedPhrase.objects.get(normalized="x y").embedding is None


def test_create_agent_key_prints_key_once_and_stores_hash(capsys):
    stdout = StringIO()
    call_command("create_agent_key", "planner", "--scopes", "resolve,governance", stdout=stdout, stderr=StringIO())
    raw = stdout.getvalue().strip()
    key = ApiKey.objects.get(agent__name="planner")
    assert raw.startswith(f"alg_{key.prefix}_")
    assert key.scopes == ["governance", "resolve"]
    assert raw not in str(list(ApiKey.objects.values()))


def test_create_agent_key_default_scopes():
    call_command("create_agent_key", "helper", stdout=StringIO(), stderr=StringIO())
    assert ApiKey.objects.get(agent__name="helper").scopes == ["feedback", "resolve"]


def test_create_agent_key_rejects_unknown_scope():
    with pytest.raises(CommandError, match="Unknown scope"):
        call_command("create_agent_key", "x", "--scopes", "resolve,root", stdout=StringIO(), stderr=StringIO())
    assert not ApiKey.objects.exists()


def test_create_agent_key_refuses_a_long_key_name_and_keeps_no_new_tenant():
    with pytest.raises(CommandError, match="Key name must be 1 to 100 characters"):
        call_command("create_agent_key", "x", "--key-name", "k" * 101, "--tenant", "fresh", stdout=StringIO(), stderr=StringIO())
    assert not ApiKey.objects.exists()
    assert not Tenant.objects.filter(slug="fresh").exists()


@pytest.mark.parametrize("slug", ["bad slug!", "s" * 61, ""])
def test_demo_refuses_a_tenant_that_is_not_a_slug(settings, tmp_path, slug):
    settings.DATASETS_DIR = tmp_path
    with pytest.raises(CommandError, match="--tenant: A tenant slug is 1 to 60"):
        call_command("demo", "--no-admin", "--tenant", slug, stdout=StringIO())
    assert not Tenant.objects.filter(slug=slug).exists() and not Verb.objects.exists()


def test_demo_is_one_transaction_a_failure_leaves_nothing_behind(settings, tmp_path, monkeypatch):
    from django.contrib.auth import get_user_model

    import learning.services.demo

    def broken(**kwargs):
        raise RuntimeError("key store down (test)")

    settings.DATASETS_DIR = tmp_path
    monkeypatch.setattr(learning.services.demo, "agent_key_create", broken)
    with pytest.raises(RuntimeError):
        call_command("demo", "--tenant", "acme", stdout=StringIO())
    assert not Tenant.objects.filter(slug="acme").exists() and not Verb.objects.exists()
    assert not get_user_model().objects.filter(username__in=["admin", "reviewer"]).exists()
    out = StringIO()
    monkeypatch.undo()
    call_command("demo", "--tenant", "acme", stdout=out)  # run again: the whole workspace
    assert "Admin user: admin" in out.getvalue() and "reviewer token" in out.getvalue() and "Demo agent key" in out.getvalue()
    again = StringIO()
    call_command("demo", "--tenant", "acme", stdout=again)  # and again: nothing new to show
    assert "Admin user" not in again.getvalue() and "Demo agent key" not in again.getvalue()


def test_demo_without_dataset_loads_built_in_catalogue(settings, tmp_path):
    settings.DATASETS_DIR = tmp_path
    call_command("demo", "--no-admin", stdout=StringIO())
    assert Verb.objects.filter(name="cbu.list").exists()
    assert VerbPhrase.objects.filter(embedding__isnull=False).count() == VerbPhrase.objects.count() > 0


def test_demo_with_banking77(settings):
    from learning import datasets

    if not datasets.available():
        pytest.fail(f"BANKING77 is expected at {datasets.banking77_dir()}")
    call_command("demo", "--no-admin", "--no-key", stdout=StringIO())
    assert Verb.objects.filter(domain="banking").count() == 77
    assert VerbPhrase.objects.count() == 77 * 5


def test_periodic_sweep_embeds_rows_written_while_the_embedder_was_down(catalogue, failing_embedder):
    from embeddings.tasks import embeddings_backfill_task

    learned_phrase_upsert(phrase="written while down", verb=catalogue["cbu.list"])
    down = embeddings_backfill_task.apply().get()
    assert (down["embedded"], down["failed"]) == (0, 1)
    set_embedder(None)
    result = embeddings_backfill_task.apply().get()
    assert result["embedded"] == 1 and result["failed"] == 0
    assert LearnedPhrase.objects.get(normalized="written while down").embedding is not None


def test_a_command_says_in_one_line_that_the_database_is_unreachable():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "DEBUG": "1", "DATABASE_URL": "postgresql://app@127.0.0.1:1/nowhere", "DB_CONNECT_TIMEOUT_S": "2"}
    env.pop("TEST_DATABASE_NAME", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "purge_expired_blocks"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stderr.startswith("Database unavailable: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_command_without_its_settings_says_which_in_one_line():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    drop = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "TEST_DATABASE_NAME", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("Configuration: SECRET_KEY must be set"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


class _Cause(Exception):
    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def _main_raising(monkeypatch, exc):
    """manage.py's main() with a command that raises ``exc`` (chained from a driver error, as Django wraps it)."""
    import importlib.util
    from pathlib import Path

    import django.core.management

    spec = importlib.util.spec_from_file_location("manage_cli", Path(__file__).resolve().parent.parent / "manage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def command(argv):
        raise exc

    monkeypatch.setattr(django.core.management, "execute_from_command_line", command)
    return module.main


def _chained(cls, message, sqlstate):
    try:
        try:
            raise _Cause(sqlstate)
        except _Cause as cause:
            raise cls(message) from cause
    except cls as exc:
        return exc


@pytest.mark.parametrize("sqlstate", ["08006", "28P01", "3D000", "57P03"])
def test_manage_py_says_in_one_line_that_it_cannot_reach_the_database(monkeypatch, capsys, sqlstate):
    from django.db import OperationalError

    main = _main_raising(monkeypatch, _chained(OperationalError, "connection failed: no such host\nmore detail", sqlstate))
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1 and capsys.readouterr().err == "Database unavailable: connection failed: no such host\n"


@pytest.mark.parametrize("sqlstate", ["55P03", "40P01", "57014"])  # lock not available, deadlock, statement timeout
def test_manage_py_keeps_the_traceback_of_other_operational_errors(monkeypatch, capsys, sqlstate):
    """A lock or statement timeout, a deadlock: the traceback names the statement; not read as a database down."""
    from django.db import OperationalError

    main = _main_raising(monkeypatch, _chained(OperationalError, "canceling statement due to lock timeout", sqlstate))
    with pytest.raises(OperationalError, match="lock timeout"):
        main()
    assert "Database unavailable" not in capsys.readouterr().err


def test_manage_py_says_a_database_is_not_migrated_and_keeps_other_programming_errors(monkeypatch, capsys):
    from django.db import ProgrammingError

    main = _main_raising(monkeypatch, _chained(ProgrammingError, 'relation "learning_verb" does not exist', "42P01"))
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1 and "run `.venv/bin/python manage.py migrate` first" in capsys.readouterr().err
    main = _main_raising(monkeypatch, _chained(ProgrammingError, "syntax error at or near", "42601"))
    with pytest.raises(ProgrammingError, match="syntax error"):
        main()


def test_manage_py_keeps_the_traceback_of_a_configuration_error_raised_outside_the_settings(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    main = _main_raising(monkeypatch, ImproperlyConfigured("an app's own misuse"))
    with pytest.raises(ImproperlyConfigured, match="misuse"):
        main()
