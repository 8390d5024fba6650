"""Bulk import of learned phrases: command and API."""

import json
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from learning.importing import ImportFormatError, parse
from learning.models import LearnedPhrase
from learning.resolution import resolve
from learning.services.blocks import phrase_block_add
from learning.services.phrases import learned_phrase_upsert

GOOD = [
    {"phrase": "spin up a client unit", "verb": "cbu.create"},
    {"phrase": "show every client unit", "verb": "cbu.list"},
    {"phrase": "look for a contract", "verb": "document.search"},
]


def post_json(client, **body):
    body.setdefault("format", "json")
    return client.post("/api/v1/learning/import", body, format="json")


def test_json_import_writes_with_embeddings_and_resolves(gov_api, catalogue):
    r = post_json(gov_api, content=json.dumps(GOOD))
    assert r.status_code == 200, r.json()
    body = r.json()
    assert (body["imported"], body["updated"], body["unchanged"], body["rejected"]) == (3, 0, 0, 0)
    assert LearnedPhrase.objects.filter(user_id__isnull=True, embedding__isnull=False).count() == 3
    assert resolve(text="spin up a client unit").verb == "cbu.create"
    assert LearnedPhrase.objects.get(normalized="look for a contract").history.count() == 1
    again = post_json(gov_api, content=json.dumps(GOOD + [{"phrase": "show every client unit", "verb": "cbu.list"}])).json()
    assert (again["imported"], again["updated"], again["unchanged"]) == (0, 0, 4)


def test_import_updates_existing_mapping(gov_api, catalogue):
    learned_phrase_upsert(phrase="show every client unit", verb=catalogue["cbu.delete"])
    body = post_json(gov_api, content=json.dumps(GOOD)).json()
    assert (body["imported"], body["updated"], body["unchanged"]) == (2, 1, 0)
    assert LearnedPhrase.objects.get(normalized="show every client unit").verb.name == "cbu.list"


def test_dry_run_writes_nothing(gov_api, catalogue):
    learned_phrase_upsert(phrase="show every client unit", verb=catalogue["cbu.delete"])
    body = post_json(gov_api, content=json.dumps(GOOD), dry_run=True).json()
    assert body["dry_run"] is True
    assert (body["imported"], body["updated"], body["unchanged"]) == (2, 1, 0)
    assert sorted(body["would_add"]) == ["look for a contract", "spin up a client unit"]
    assert LearnedPhrase.objects.count() == 1
    assert LearnedPhrase.objects.get().verb.name == "cbu.delete"


def test_one_bad_row_writes_nothing_and_names_rows(gov_api, catalogue):
    phrase_block_add(phrase="wipe every client unit", verb_name="cbu.delete")
    rows = GOOD + [
        {"phrase": "", "verb": "cbu.list"},  # row 4
        {"phrase": "do a thing", "verb": "cbu.nope"},  # row 5
        {"phrase": "Spin up a client unit", "verb": "cbu.delete"},  # row 6: same phrase, another verb
        {"phrase": "wipe every client unit", "verb": "cbu.delete"},  # row 7: blocked exactly
        {"phrase": "wipe all the client units", "verb": "cbu.delete"},  # row 8: paraphrase of a block
        {"phrase": "make a cbu", "verb": ""},  # row 9
        {"phrase": "\u200b\u200b", "verb": "cbu.list"},  # row 10: only zero-width spaces
    ]
    r = post_json(gov_api, content=json.dumps(rows))
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == "import_invalid" and body["imported"] == 0 and body["rejected"] == 7
    by_row = {e["row"]: e for e in body["errors"]}
    assert sorted(by_row) == [4, 5, 6, 7, 8, 9, 10]
    assert "empty" in by_row[4]["reason"] and "empty" in by_row[10]["reason"]
    assert "cbu.nope" in by_row[5]["reason"]
    assert "row 1" in by_row[6]["reason"]
    assert "Blocklist" in by_row[7]["reason"] and "paraphrase" in by_row[8]["reason"]
    assert not LearnedPhrase.objects.exists()


def test_csv_upload_with_quoted_commas(gov_api, catalogue):
    content = b'phrase,verb\n"find the contract, the one from May",document.search\nlist units,cbu.list\n'
    upload = SimpleUploadedFile("p.csv", content, content_type="text/csv")
    r = gov_api.post(
        "/api/v1/learning/import", {"format": "csv", "file": upload, "scope": "user", "user_id": "alice"}, format="multipart"
    )
    assert r.status_code == 200, r.json()
    assert r.json()["imported"] == 2
    row = LearnedPhrase.objects.get(user_id="alice", verb__name="document.search")
    assert row.phrase == "find the contract, the one from May"


def test_csv_missing_column(gov_api, catalogue):
    r = post_json(gov_api, format="csv", content="phrase,action\nlist units,cbu.list\n")
    assert r.status_code == 400
    assert "verb" in r.json()["fields"]["content"][0]
    assert not LearnedPhrase.objects.exists()


def test_csv_with_a_column_named_twice_is_refused(gov_api, catalogue):
    r = post_json(gov_api, format="csv", content="phrase,verb,Phrase\nlist units,cbu.list,delete units\n")
    assert r.status_code == 400
    assert "phrase" in r.json()["fields"]["content"][0] and "more than once" in r.json()["fields"]["content"][0]
    assert not LearnedPhrase.objects.exists()


def test_a_byte_order_mark_in_json_content_is_dropped(gov_api, catalogue):
    r = post_json(gov_api, format="csv", content="\ufeffphrase,verb\nlist units,cbu.list\n")
    assert r.status_code == 200, r.content
    assert LearnedPhrase.objects.get().normalized == "list units"


def test_yaml_import_and_yaml_bomb_refused(gov_api, catalogue):
    ok = post_json(gov_api, format="yaml", content="cbu.list:\n  - show all units\n  - units please\n")
    assert ok.status_code == 200 and ok.json()["imported"] == 2
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n'
    r = post_json(gov_api, format="yaml", content=bomb)
    assert r.status_code == 400
    assert "not allowed" in r.json()["detail"]
    assert LearnedPhrase.objects.count() == 2


def test_too_large_import_refused(gov_api, catalogue, settings):
    big = "x" * (50 * 1024 * 1024)
    r = gov_api.post("/api/v1/learning/import", {"format": "json", "content": big}, format="json")
    assert r.status_code == 413
    assert r.json()["code"] == "too_large"
    settings.LEARNING_IMPORT_MAX_BYTES = 100
    r = post_json(gov_api, content=json.dumps(GOOD * 3))
    assert r.status_code == 400 and "limit" in r.json()["detail"]
    upload = SimpleUploadedFile("p.json", json.dumps(GOOD * 3).encode(), content_type="application/json")
    r = gov_api.post("/api/v1/learning/import", {"format": "json", "file": upload}, format="multipart")
    assert r.status_code == 400 and "file" in r.json()["fields"]
    assert not LearnedPhrase.objects.exists()


def test_row_limit(gov_api, catalogue, settings):
    settings.LEARNING_IMPORT_MAX_ROWS = 2
    r = post_json(gov_api, content=json.dumps(GOOD))
    assert r.status_code == 400 and "more than the limit of 2 (LEARNING_IMPORT_MAX_ROWS)" in r.json()["detail"]
    content = "phrase,verb\n" + "".join(f"list units {i},cbu.list\n" for i in range(5))
    r = gov_api.post("/api/v1/learning/import", {"format": "csv", "content": content}, format="json")
    assert r.status_code == 400 and "more than 2 rows" in r.json()["detail"], r.json()  # not "holds 3"


def test_import_request_validation(gov_api, catalogue):
    assert post_json(gov_api, content=json.dumps(GOOD), scope="user").status_code == 400
    assert post_json(gov_api, format="xml", content="<a/>").status_code == 400
    assert post_json(gov_api, content="{not json").status_code == 400
    assert gov_api.post("/api/v1/learning/import", {"format": "json"}, format="json").status_code == 400


@pytest.mark.parametrize(
    "content,fmt,message",
    [
        ("[1, 2]", "json", "Row 1"),
        ('{"phrases": [{"phrase": "x"}]}', "json", "missing verb"),
        ("just a string", "yaml", "Expected a list"),
        ("phrase,verb\na,b,c\n", "csv", "more fields"),
        ("", "csv", "missing the column"),
        ('{"phrases": ' + "[" * 30 + "]" * 30 + "}", "json", "nested too deeply"),  # within the decoder's recursion
        ("[" * 30 + "]" * 30, "yaml", "nested too deeply"),
    ],
)
def test_parse_errors(content, fmt, message):
    with pytest.raises(ImportFormatError, match=message):
        parse(content, fmt)


def test_command_import_dry_run_and_errors(tmp_path, catalogue, capsys):
    f = tmp_path / "phrases.yaml"
    f.write_text("- phrase: spin up a client unit\n  verb: cbu.create\n- phrase: look for a contract\n  verb: document.search\n")
    call_command("import_phrases", str(f), "--dry-run", "--no-progress")
    assert "dry run: would import 2" in capsys.readouterr().out
    assert not LearnedPhrase.objects.exists()
    call_command("import_phrases", str(f), "--scope", "user", "--user-id", "alice", "--no-progress")
    assert "imported 2, updated 0, unchanged 0, kept 0, rejected 0" in capsys.readouterr().out
    assert LearnedPhrase.objects.filter(user_id="alice").count() == 2

    bad = tmp_path / "bad.csv"
    bad.write_text("phrase,verb\nlist units,cbu.list\nzap it,cbu.zap\n")
    with pytest.raises(CommandError, match="1 invalid row"):
        call_command("import_phrases", str(bad), "--no-progress")
    assert "row 2: verb: Unknown or inactive verb 'cbu.zap'" in capsys.readouterr().err
    assert LearnedPhrase.objects.count() == 2
    with pytest.raises(CommandError, match="needs --user-id"):
        call_command("import_phrases", str(f), "--scope", "user")
    with pytest.raises(CommandError, match="format"):
        call_command("import_phrases", str(tmp_path / "x.txt"))


def test_command_refuses_big_file_and_yaml_bomb(tmp_path, catalogue, settings):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x","x","x","x","x","x","x","x"]\nb: [*a,*a,*a,*a,*a,*a,*a,*a]\n')
    with pytest.raises(CommandError, match="aliases are not allowed|anchors are not allowed"):
        call_command("import_phrases", str(bomb), "--no-progress")
    big = tmp_path / "big.json"
    big.write_text(json.dumps(GOOD * 50))
    settings.LEARNING_IMPORT_MAX_BYTES = 1000
    with pytest.raises(CommandError, match="the limit is 1000 bytes"):
        call_command("import_phrases", str(big), "--no-progress")
    assert not LearnedPhrase.objects.exists()


def test_import_history_records_source(gov_api, catalogue):
    post_json(gov_api, content=json.dumps(GOOD[:1]))
    row = LearnedPhrase.objects.get()
    assert row.source == "import:reviewer-tool"
    assert row.history.get().history_change_reason == "import (import:reviewer-tool)"


def _deleted_between_the_two_reads(monkeypatch, normalized: str):
    """Another write deletes the stored row of ``normalized`` after the import's first read, before its lock."""
    from learning.services import imports

    real = imports._import_lock

    def lock_after_delete():
        LearnedPhrase.objects.filter(normalized=normalized).delete()
        real()

    monkeypatch.setattr(imports, "_import_lock", lock_after_delete)


def test_a_row_deleted_meanwhile_is_written_with_its_vector(gov_api, catalogue, monkeypatch):
    learned_phrase_upsert(phrase="show every client unit", verb=catalogue["cbu.list"])
    assert LearnedPhrase.objects.get().embedding_model  # unchanged on the first read: no vector computed for it
    _deleted_between_the_two_reads(monkeypatch, "show every client unit")
    body = post_json(gov_api, content=json.dumps(GOOD)).json()
    assert (body["imported"], body["updated"], body["unchanged"], body["unembedded"]) == (3, 0, 0, 0)
    assert LearnedPhrase.objects.filter(embedding__isnull=True).count() == 0


def test_a_row_deleted_meanwhile_is_still_checked_against_blocks(gov_api, catalogue, monkeypatch):
    learned_phrase_upsert(phrase="wipe all the client units", verb=catalogue["cbu.delete"])
    phrase_block_add(phrase="wipe every client unit", verb_name="cbu.delete")  # a block made after the phrase
    _deleted_between_the_two_reads(monkeypatch, "wipe all the client units")
    r = post_json(gov_api, content=json.dumps(GOOD + [{"phrase": "wipe all the client units", "verb": "cbu.delete"}]))
    assert r.status_code == 400 and "paraphrase" in r.json()["errors"][0]["reason"]
    assert LearnedPhrase.objects.filter(normalized="wipe all the client units").exists()  # rolled back: nothing lost
    assert not LearnedPhrase.objects.filter(normalized="spin up a client unit").exists()


def test_a_phrase_to_update_deleted_meanwhile_is_a_conflict_and_nothing_is_imported(gov_api, catalogue, monkeypatch):
    from learning.services import imports as imports_mod

    learned_phrase_upsert(phrase="show every client unit", verb=catalogue["cbu.delete"])
    real = imports_mod.selectors.import_existing
    reads = []

    def read_then_deleted(**kw):  # the second read, under the import's lock: an admin deletes the row right after
        found = real(**kw)
        reads.append(1)
        if len(reads) == 2:
            LearnedPhrase.objects.filter(normalized="show every client unit").delete()
        return found

    monkeypatch.setattr(imports_mod.selectors, "import_existing", read_then_deleted)
    r = post_json(gov_api, content=json.dumps(GOOD))
    assert r.status_code == 409, r.json()
    assert "content" in r.json()["fields"] and "deleted meanwhile" in r.json()["detail"]
    # nothing of the import was written (the deletion, inside the import's transaction in this test, rolled back with it)
    assert list(LearnedPhrase.objects.values_list("normalized", "verb__name")) == [("show every client unit", "cbu.delete")]


def test_a_rerun_keeps_what_a_reviewer_switched_off_or_a_user_taught_unless_told_to_override(gov_api, catalogue, tmp_path):
    """An import run again does not turn back on a phrase a reviewer switched off, nor re-point a phrase a correction
    or a confirmation taught another verb: those are counted as kept. ``override`` replaces them."""
    from learning.services.corrections import phrase_confirmation_apply, phrase_correction_apply

    assert post_json(gov_api, content=json.dumps(GOOD)).json()["imported"] == 3
    LearnedPhrase.objects.filter(normalized="look for a contract").update(is_active=False)  # a reviewer's revert
    again = post_json(gov_api, content=json.dumps(GOOD)).json()
    assert (again["imported"], again["updated"], again["unchanged"], again["kept"]) == (0, 0, 2, 1)
    assert not LearnedPhrase.objects.get(normalized="look for a contract").is_active

    rows = [{"phrase": "wipe that unit", "verb": "cbu.delete"}, {"phrase": "make a unit", "verb": "cbu.create"}]
    assert post_json(gov_api, content=json.dumps(rows), scope="user", user_id="alice").json()["imported"] == 2
    phrase_correction_apply(text="wipe that unit", wrong_verb="cbu.delete", correct_verb="cbu.list", user_id="alice")
    phrase_confirmation_apply(text="list it all", verb="cbu.list", user_id="alice")
    rows.append({"phrase": "list it all", "verb": "cbu.create"})
    dry = post_json(gov_api, content=json.dumps(rows), scope="user", user_id="alice", dry_run=True).json()
    assert sorted(dry["would_keep"]) == ["list it all", "wipe that unit"] and dry["kept"] == 2
    kept = post_json(gov_api, content=json.dumps(rows), scope="user", user_id="alice").json()
    assert (kept["updated"], kept["unchanged"], kept["kept"]) == (0, 1, 2)
    mine = dict(LearnedPhrase.objects.filter(user_id="alice").values_list("normalized", "verb__name"))
    assert mine == {"wipe that unit": "cbu.list", "make a unit": "cbu.create", "list it all": "cbu.list"}

    f = tmp_path / "again.json"
    f.write_text(json.dumps(GOOD), encoding="utf-8")
    out = StringIO()
    call_command("import_phrases", str(f), "--no-progress", stdout=out)
    assert "kept 1," in out.getvalue() and "--override replaces them" in out.getvalue()
    forced = post_json(gov_api, content=json.dumps(rows), scope="user", user_id="alice", override=True).json()
    assert (forced["updated"], forced["kept"]) == (2, 0)
    call_command("import_phrases", str(f), "--no-progress", "--override", stdout=StringIO())
    assert LearnedPhrase.objects.get(normalized="look for a contract", user_id__isnull=True).is_active
    mine = dict(LearnedPhrase.objects.filter(user_id="alice").values_list("normalized", "verb__name"))
    assert mine == {"wipe that unit": "cbu.delete", "make a unit": "cbu.create", "list it all": "cbu.create"}


def test_a_phrase_switched_off_while_the_import_waits_for_its_row_is_kept(gov_api, catalogue, monkeypatch):
    """The kept rule is decided again on the rows the import locks: a reviewer who switches a phrase off between the
    import's read and its write is not undone."""
    from learning.services import imports as imports_mod

    learned_phrase_upsert(phrase="show every client unit", verb=catalogue["cbu.delete"])
    classify = imports_mod._import_classify
    reads = []

    def classify_then_switched_off(plan, existing, override):
        answer = classify(plan, existing, override)
        reads.append(1)
        if len(reads) == 2:  # the read under the import's lock: a reviewer switches the phrase off right after
            LearnedPhrase.objects.filter(normalized="show every client unit").update(is_active=False)
        return answer

    monkeypatch.setattr(imports_mod, "_import_classify", classify_then_switched_off)
    body = post_json(gov_api, content=json.dumps(GOOD)).json()
    assert (body["imported"], body["updated"], body["kept"]) == (2, 0, 1), body
    row = LearnedPhrase.objects.get(normalized="show every client unit")
    assert (row.is_active, row.verb.name) == (False, "cbu.delete")


def test_a_blank_csv_column_may_stay_empty(gov_api, catalogue):
    """A spreadsheet's trailing delimiter leaves a column with no name: accepted while its cells are empty."""
    r = gov_api.post(
        "/api/v1/learning/import", {"format": "csv", "content": "phrase,verb,\nlist units,cbu.list,\n"}, format="json"
    )
    assert r.status_code == 200 and r.json()["imported"] == 1, r.content
    r = gov_api.post(
        "/api/v1/learning/import", {"format": "csv", "content": "phrase,verb,\nshow units,cbu.list,alice\n"}, format="json"
    )
    assert r.status_code == 400 and "column with no name" in r.json()["detail"], r.content
