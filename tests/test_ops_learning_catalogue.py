"""load_verbs on hostile catalogue files: deep nesting, values the database refuses, unreadable files."""

import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from learning.models import Verb

pytestmark = pytest.mark.django_db


def load(path) -> str:
    with pytest.raises(CommandError) as exc:
        call_command("load_verbs", str(path), "--no-progress", stdout=StringIO())
    assert "nothing loaded" in str(exc.value)
    assert Verb.objects.count() == 0
    return str(exc.value)


@pytest.mark.parametrize("levels", [500, 50_000])
def test_deeply_nested_yaml_is_refused_at_once(tmp_path, levels):
    f = tmp_path / "deep.yaml"
    f.write_text("[" * levels + "]" * levels)
    started = time.monotonic()
    message = load(f)
    assert time.monotonic() - started < 5
    assert "deep.yaml" in message and "nested too deeply" in message


def test_anchors_are_refused_like_aliases(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("verbs:\n  - &v\n    name: cbu.x\n")
    assert "anchors and aliases are not allowed (line 2)" in load(f)


LONG_NAME = "cbu." + "x" * 117  # 121 characters


@pytest.mark.parametrize(
    "body, expected",
    [
        (f"- name: {LONG_NAME}\n", "'name' is longer than 120 characters"),
        (f"- name: cbu.x\n  display_name: {'D' * 121}\n", "verb cbu.x: 'display_name' is longer than 120 characters"),
        (f"- name: cbu.x\n  domain: {'d' * 61}\n", "verb cbu.x: 'domain' is longer than 60 characters"),
        ('- name: cbu.x\n  phrases: ["a\\0b"]\n', "verb cbu.x: phrase 1 contains a NUL character"),
        ('- name: cbu.x\n  phrases: [ok, "a\\ud800b"]\n', "verb cbu.x: phrase 2 contains a lone UTF-16 surrogate"),
        ('- name: cbu.x\n  description: "a\\0b"\n', "verb cbu.x: 'description' contains a NUL character"),
        ('- name: cbu.x\n  display_name: "a\\ud800b"\n', "verb cbu.x: 'display_name' contains a lone UTF-16 surrogate"),
        ("- name: cbu.x\n  phrases: [" + "\ufdfa" * 40 + "]\n", "verb cbu.x: phrase 1 is longer than 500 characters"),
    ],
)
def test_values_the_database_refuses_are_named_before_anything_is_stored(tmp_path, body, expected):
    f = tmp_path / "c.yaml"
    f.write_text("- name: cbu.fine\n  phrases: [a fine phrase]\n" + body, encoding="utf-8")
    message = load(f)
    assert f"{f}:" in message and expected in message


def test_longest_accepted_values_load(tmp_path):
    name = "cbu." + "x" * 116
    f = tmp_path / "c.yaml"
    f.write_text(f"- name: {name}\n  display_name: {'D' * 120}\n  phrases: [{'p' * 500}]\n")
    call_command("load_verbs", str(f), "--no-progress", stdout=StringIO())
    assert Verb.objects.get().name == name


def test_unreadable_file_is_named_with_the_reason(tmp_path):
    assert "/proc/self/mem: cannot read the file (Input/output error)" in load(Path("/proc/self/mem"))
    (tmp_path / "dir.yaml").mkdir()
    assert f"{tmp_path / 'dir.yaml'}: cannot read the file" in load(tmp_path)


def test_permission_denied_is_named(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("- name: cbu.x\n")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)
    assert f"{f}: cannot read the file (Permission denied)" in load(f)
