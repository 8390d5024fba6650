"""Typographic quotes and dashes (a phone's smart punctuation) read as the plain ones a keyboard types, in new
text and in text stored before they were folded."""

import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import connection

from common.text import normalize_phrase, rewritten_pattern
from learning.models import LearnedPhrase, PhraseBlock
from learning.services.phrases import learned_phrase_upsert
from memories.models import Memory
from memories.simhash import simhash_hex

pytestmark = pytest.mark.django_db
URL = "/api/v1/resolve"


@pytest.mark.parametrize(
    "typed,plain",
    [
        ("I\N{RIGHT SINGLE QUOTATION MARK}m locked out", "I'm locked out"),
        ("don\N{ACUTE ACCENT}t pay", "don't pay"),
        ("why didn`t it go", "why didn't it go"),
        ("\N{LEFT DOUBLE QUOTATION MARK}Cancel my card\N{RIGHT DOUBLE QUOTATION MARK}", '"cancel my card"'),
        ("\N{LEFT-POINTING DOUBLE ANGLE QUOTATION MARK}bonjour\N{RIGHT-POINTING DOUBLE ANGLE QUOTATION MARK}", "bonjour"),
        ("e\N{HYPHEN}mail \N{EN DASH} now \N{EM DASH} please", "e-mail - now - please"),
        ("top\N{NON-BREAKING HYPHEN}up \N{MINUS SIGN}5", "top-up -5"),
    ],
)
def test_typographic_punctuation_normalises_as_the_plain_one(typed, plain):
    assert normalize_phrase(typed) == normalize_phrase(plain)


def test_plain_text_is_not_matched_by_the_rewritten_pattern():
    import re

    pattern = re.compile(rewritten_pattern())
    assert not pattern.search('i\'m locked out - "really" (now)')
    assert pattern.search("i\N{RIGHT SINGLE QUOTATION MARK}m") and pattern.search("pay\N{ZERO WIDTH SPACE}bill")
    assert not pattern.search(normalize_phrase("I\N{RIGHT SINGLE QUOTATION MARK}m \N{EN DASH} pay\N{ZERO WIDTH SPACE}x"))


def test_a_phrase_taught_on_a_desktop_answers_the_phone_exactly(api, catalogue):
    learned_phrase_upsert(phrase="I'm out of units", verb=catalogue["cbu.list"], user_id="alice")
    r = api.post(URL, {"text": "I\N{RIGHT SINGLE QUOTATION MARK}m out of units", "user_id": "alice"}, format="json")
    assert r.status_code == 200 and r.json()["verb"] == "cbu.list", r.content
    assert r.json()["candidates"][0]["source"] == "user_learned_exact", r.json()


def _migration(app, name):
    return importlib.import_module(f"{app}.migrations.{name}")


def test_stored_text_is_normalised_again_and_a_collision_keeps_the_old_row(api, catalogue):
    curly = "i\N{RIGHT SINGLE QUOTATION MARK}m out of units"
    old = learned_phrase_upsert(phrase="x", verb=catalogue["cbu.list"], user_id="alice")
    LearnedPhrase.objects.filter(pk=old.pk).update(normalized=curly, phrase=curly)
    # bob has both forms: the plain one is already there, so the curly one keeps its text
    plain = learned_phrase_upsert(phrase="i'm out of units", verb=catalogue["cbu.list"], user_id="bob")
    twin = learned_phrase_upsert(phrase="y", verb=catalogue["cbu.list"], user_id="bob")
    LearnedPhrase.objects.filter(pk=twin.pk).update(normalized=curly)
    block = PhraseBlock.objects.create(
        phrase="delete \N{EN DASH} all", normalized="delete \N{EN DASH} all", verb=catalogue["cbu.delete"]
    )
    hidden = learned_phrase_upsert(phrase="z", verb=catalogue["cbu.list"], user_id="carol")
    LearnedPhrase.objects.filter(pk=hidden.pk).update(normalized="pay\N{ZERO WIDTH SPACE}bill")

    _migration("learning", "0012_normalized_again").normalized_again(django_apps, SimpleNamespace(connection=connection))

    assert LearnedPhrase.objects.get(pk=old.pk).normalized == "i'm out of units"
    assert LearnedPhrase.objects.get(pk=twin.pk).normalized == curly
    assert LearnedPhrase.objects.get(pk=plain.pk).normalized == "i'm out of units"
    assert PhraseBlock.objects.get(pk=block.pk).normalized == "delete - all"
    assert LearnedPhrase.objects.get(pk=hidden.pk).normalized == "paybill"
    r = api.post(URL, {"text": "I\N{RIGHT SINGLE QUOTATION MARK}m out of units", "user_id": "alice"}, format="json")
    assert r.json()["verb"] == "cbu.list" and r.json()["candidates"][0]["source"] == "user_learned_exact", r.json()


def test_memory_fingerprints_are_computed_again(agent):
    content = "Deploy with the blue\N{EN DASH}green switch, never in place"
    memory = Memory.objects.create(user_id="alice", content=content, simhash="0" * 16, content_sha256="x" * 64)
    untouched = Memory.objects.create(user_id="alice", content="plain text", simhash="0" * 16, content_sha256="y" * 64)

    _migration("memories", "0007_simhash_again").simhash_again(django_apps, SimpleNamespace(connection=connection))

    assert Memory.objects.get(pk=memory.pk).simhash == simhash_hex(content) != "0" * 16
    assert Memory.objects.get(pk=untouched.pk).simhash == "0" * 16
