"""Odd text at every door: invisible characters, values YAML and JSON read as something else, keys named twice,
undecodable command-line bytes, terminal escapes. Each is refused with its reason (400, or a command's message),
or read as a person would read it; nothing is stored that no one can see."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Agent
from common.api import ApplicationError
from common.text import normalize_phrase, terminal_safe, visible_text
from feedback.models import FeedbackRecord, MistakePattern
from feedback.services.mistakes import mistake_patterns_detect
from learning.models import LearnedPhrase, Verb
from tests.conftest import reject_n

pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/learning/import"
# Printable characters that show nothing, and format characters
BLANKS = ["\u3164", "\uffa0", "\u115f\u1160", "\u2800\u2800", "\ufe0f", "\u034f", "\u200b\u200d", "\u00ad"]


@pytest.mark.parametrize("text", BLANKS)
def test_text_that_shows_nothing_normalises_to_nothing(text):
    assert normalize_phrase(text) == "" and not visible_text(text).strip()
    assert normalize_phrase(f"pay{text}bill").replace(" ", "") == "paybill"


@pytest.mark.parametrize("text", BLANKS)
def test_text_that_shows_nothing_is_refused_on_resolve_and_import(api, gov_api, catalogue, text):
    r = api.post("/api/v1/resolve", {"text": text}, format="json")
    assert r.status_code == 400 and "text" in r.json()["fields"], r.content
    r = gov_api.post(IMPORT, {"format": "json", "content": json.dumps([{"phrase": text, "verb": "cbu.list"}])}, format="json")
    assert r.status_code == 400 and "empty" in r.json()["errors"][0]["reason"], r.content
    assert not LearnedPhrase.objects.exists()


@pytest.mark.parametrize(
    "fmt,content,reason",
    [
        ("yaml", "- phrase: " + "9" * 5000 + "\n  verb: cbu.list\n", "longer than 500 characters"),  # text, as written
        ("yaml", "- phrase: 0x" + "f" * 5000 + "\n  verb: cbu.list\n", "longer than 500 characters"),
        ("json", '[{"phrase": ' + "9" * 5000 + ', "verb": "cbu.list"}]', "too long to read"),
        ("json", '[{"phrase": true, "verb": "cbu.list"}]', "must be text; quote it"),
        ("json", '[{"phrase": 3.10, "verb": "cbu.list"}]', "must be text; quote it"),
        ("json", '[{"phrase": "list units", "verb": "cbu.list", "user_id": "alice"}]', "unknown field(s) 'user_id'"),
        ("json", '{"phrases": [{"phrase": "list units", "verb": "cbu.list"}], "scope": "user"}', "Unknown key(s) 'scope'"),
        ("csv", "phrase,verb,user_id\nlist units,cbu.list,alice\n", "unknown field(s) 'user_id'"),
        ("json", '[{"phrase": "list units", "phrase": "delete units", "verb": "cbu.list"}]', "twice"),
        ("yaml", "- phrase: list units\n  phrase: delete units\n  verb: cbu.list\n", "twice"),
        ("yaml", "cbu.list: [list units]\ncbu.list: [show units]\n", "twice"),
    ],
)
def test_values_an_import_cannot_read_as_meant_are_refused_with_the_reason(gov_api, catalogue, fmt, content, reason):
    r = gov_api.post(IMPORT, {"format": fmt, "content": content}, format="json")
    assert r.status_code == 400, r.content
    assert reason in json.dumps(r.json()), r.json()
    assert not LearnedPhrase.objects.exists()


def test_yaml_words_and_numbers_stay_the_text_written(gov_api, catalogue):
    """YAML 1.1 reads an unquoted yes as true, 0755 as 493 (octal), 12:30 as 750 (base 60), 3.10 as 3.1: an import
    keeps each phrase as written."""
    content = "cbu.list: [yes, 'off', no, 0755, 12:30, 3.10, 911, ~]\n"
    r = gov_api.post(IMPORT, {"format": "yaml", "content": content}, format="json")
    assert r.status_code == 400 and r.json()["errors"] == [{"row": 8, "field": "phrase", "reason": "The phrase is empty."}], (
        r.json()
    )
    r = gov_api.post(IMPORT, {"format": "yaml", "content": content.replace(", ~", "")}, format="json")
    assert r.status_code == 200, r.content
    assert sorted(LearnedPhrase.objects.values_list("phrase", flat=True)) == sorted(
        ["yes", "off", "no", "0755", "12:30", "3.10", "911"]
    )


def test_a_date_like_phrase_stays_text(gov_api, catalogue):
    content = "- phrase: 2024-02-30\n  verb: cbu.list\n- phrase: 2024-02-28\n  verb: cbu.list\n"
    r = gov_api.post(IMPORT, {"format": "yaml", "content": content}, format="json")
    assert r.status_code == 200, r.content
    assert sorted(LearnedPhrase.objects.values_list("normalized", flat=True)) == ["2024-02-28", "2024-02-30"]


def _catalogue_file(tmp_path, text):
    path = tmp_path / "verbs.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "text,reason",
    [
        ("- name: a.b\n  phrases: [open the account, make an account]\n  phrases: [close it]\n", "appears twice"),
        ("- name: a.b\n  name: a.c\n  phrases: [open it]\n", "appears twice"),
        ("- name: a.b\n  phrases: ['\u200b\u200b']\n", "phrase 1 is empty"),
        ("", "holds no verbs"),
        ("verbs: []\n", "holds no verbs"),
    ],
)
def test_load_verbs_refuses_what_it_would_read_otherwise_than_meant(db, tmp_path, text, reason):
    with pytest.raises(CommandError) as refused:
        call_command("load_verbs", _catalogue_file(tmp_path, text), "--no-progress", stdout=StringIO())
    assert reason in str(refused.value) and "nothing loaded" in str(refused.value)
    assert not Verb.objects.exists()


@pytest.mark.parametrize(
    "command,args",
    [
        ("load_verbs", ["verbs.yaml"]),
        ("import_phrases", ["phrases.csv"]),
        ("fit_decision", []),
    ],
)
def test_a_tenant_given_as_undecodable_bytes_is_no_tenant(db, tmp_path, command, args):
    (tmp_path / "verbs.yaml").write_text("- name: a.b\n  phrases: [open it]\n", encoding="utf-8")
    (tmp_path / "phrases.csv").write_text("phrase,verb\nopen it,a.b\n", encoding="utf-8")
    paths = [str(tmp_path / a) for a in args]
    with pytest.raises(CommandError, match="No tenant"):
        call_command(command, *paths, "--tenant", "acme\udcff", stdout=StringIO())  # how Python reads b"acme\xff"


def test_import_phrases_refuses_a_user_id_with_a_final_newline(catalogue, tmp_path):
    path = tmp_path / "phrases.csv"
    path.write_text("phrase,verb\nlist my units,cbu.list\n", encoding="utf-8")
    with pytest.raises(CommandError, match="Malformed user id"):
        call_command("import_phrases", str(path), "--scope", "user", "--user-id", "alice\n", stdout=StringIO())
    assert not LearnedPhrase.objects.exists()


def test_backfill_refuses_a_batch_size_beyond_its_bound(db):
    with pytest.raises(CommandError, match="--batch-size must be from 1 to"):
        call_command("backfill_embeddings", "--batch-size", str(10**20), "--no-progress", stdout=StringIO())


def test_a_mistake_category_with_invisible_characters_is_the_visible_one(agent):
    reject_n(agent, 2, category="wrong_recipient")
    reject_n(agent, 1, category="wrong_recipient\u200b")
    reject_n(agent, 3, category="\u200b\u200b", notes="\u200b")
    assert set(FeedbackRecord.objects.values_list("mistake_category", flat=True)) == {"wrong_recipient", ""}
    assert set(FeedbackRecord.objects.values_list("human_explanation", flat=True)) == {"never email the CEO", ""}
    mistake_patterns_detect()
    categories = set(MistakePattern.objects.values_list("category", flat=True))
    assert "wrong_recipient" in categories and all(c.strip() and visible_text(c) == c for c in categories)


def test_the_report_never_sends_an_agents_escape_sequences_to_the_terminal(agent):
    reject_n(agent, 3, category="\x1b[2J\x1b[31mfake", notes="\x1b]0;pwned\x07 see \u202eevil")
    mistake_patterns_detect()
    for view in ("feedback", "mistakes"):
        out = StringIO()
        call_command("autonomy_report", view, agent.name, stdout=out)
        assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue() and "\u202e" not in out.getvalue()
    assert terminal_safe("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert terminal_safe("plain text\nnext line") == "plain text next line"


@pytest.mark.parametrize("field", ["agent_name", "key_name"])
def test_an_agent_or_key_name_that_shows_nothing_is_refused(db, field):
    from agents.services import agent_key_create

    names = {"agent_name": "mailer", "key_name": "default", field: "\u200b\u200b"}
    with pytest.raises(ApplicationError) as refused:
        agent_key_create(scopes=["resolve"], **names)
    assert refused.value.field == {"agent_name": "name", "key_name": "key_name"}[field]
    assert not Agent.objects.filter(name="\u200b\u200b").exists()


def test_load_verbs_refuses_a_name_ending_in_a_newline(db, tmp_path):
    """A YAML block scalar ends its value with a newline: a verb no request could name, beside the real one."""
    path = tmp_path / "verbs.yaml"
    path.write_text("- name: |\n    cbu.listed\n  phrases: [list them]\n", encoding="utf-8")
    with pytest.raises(CommandError, match="must be"):
        call_command("load_verbs", str(path), stdout=StringIO())
    assert not Verb.objects.exists()
