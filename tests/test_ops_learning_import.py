"""import_phrases run twice at once, and on a file it cannot read."""

import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from learning import selectors
from learning.models import LearnedPhrase

PHRASES = ["spin up a client unit", "show every client unit", "look for a contract", "wipe that unit"]
VERBS = ["cbu.create", "cbu.list", "document.search", "cbu.delete"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_imports_of_one_file_both_succeed(catalogue, tmp_path, monkeypatch):
    f = tmp_path / "phrases.csv"
    f.write_text("phrase,verb\n" + "".join(f"{p},{v}\n" for p, v in zip(PHRASES, VERBS, strict=True)))
    planned = threading.Barrier(2)
    local = threading.local()
    import_existing = selectors.import_existing

    def both_plan_before_either_writes(**kwargs):
        if not getattr(local, "planned", False):
            local.planned = True
            planned.wait(timeout=60)
        return import_existing(**kwargs)

    monkeypatch.setattr(selectors, "import_existing", both_plan_before_either_writes)
    outputs, errors = [], []

    def run():
        out = StringIO()
        try:
            call_command("import_phrases", str(f), "--no-progress", stdout=out)
            outputs.append(out.getvalue())
        except Exception as exc:  # asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sorted(o.split(",")[0] for o in outputs) == ["imported 0", "imported 4"]
    assert any("unchanged 4" in o for o in outputs)
    assert LearnedPhrase.objects.filter(user_id__isnull=True).count() == 4


def test_an_import_of_a_phrase_written_meanwhile_elsewhere_asks_for_a_retry(catalogue, tmp_path, monkeypatch):
    """A writer that takes no import lock (a confirmation) can still win the race: one line, nothing stored."""
    from learning.services import imports
    from learning.services.phrases import learned_phrase_upsert

    f = tmp_path / "phrases.csv"
    f.write_text("phrase,verb\nspin up a client unit,cbu.create\n")
    classify = imports._import_classify

    def written_meanwhile(plan, existing, override):
        if not existing and not LearnedPhrase.objects.exists():
            answer = classify(plan, existing, override)
            learned_phrase_upsert(phrase="spin up a client unit", verb=catalogue["cbu.list"])
            return answer
        return classify(plan, existing, override)

    monkeypatch.setattr(imports, "_import_classify", written_meanwhile)
    monkeypatch.setattr(selectors, "import_existing", lambda **kwargs: {})
    with pytest.raises(CommandError, match=r"^Another write added some of these phrases meanwhile.*Retry the import\.$"):
        call_command("import_phrases", str(f), "--no-progress", stdout=StringIO())


@pytest.mark.django_db
def test_an_unreadable_file_is_named_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(CommandError, match=r"^Cannot read /proc/self/mem: Input/output error\.$"):
        call_command("import_phrases", "/proc/self/mem", "--format", "csv", "--no-progress")
    f = tmp_path / "phrases.csv"
    f.write_text("phrase,verb\na,cbu.list\n")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(CommandError, match=r"^Cannot read .*phrases.csv: Permission denied\.$"):
        call_command("import_phrases", str(f), "--no-progress")
    assert LearnedPhrase.objects.count() == 0


def test_the_command_shows_the_writes_of_an_import_under_a_bar(catalogue, tmp_path, capsys):
    """After the embedding's bar, the writes (minutes on a large import: the HNSW indexes) have their own."""
    f = tmp_path / "rows.csv"
    f.write_text("phrase,verb\n" + "".join(f"list the units of site {i},cbu.list\n" for i in range(1001)), encoding="utf-8")
    call_command("import_phrases", str(f), stdout=StringIO())
    shown = capsys.readouterr().err
    assert "writing phrases: 100%" in shown and "| 2/2 " in shown, shown[-500:]  # 1,001 rows: two batches
