"""What a reviewer types in the admin's catalogue pages is normalized and embedded as a load is: a verb's phrases
and entity aliases match at once, duplicates after normalisation are errors on the page (never a 500), and the
catalogue prior refits after a phrase changes. Blocks are added through the API, not the admin."""

import pytest
from django.test import Client

from common.text import normalize_phrase, text_hash
from learning.models import EntityAlias, PhraseBlock, Verb, VerbPhrase
from learning.resolution import resolve
from learning.selectors import entity_alias_resolve
from learning.services.blocks import phrase_block_add
from tests.conftest import reviewer_user

pytestmark = pytest.mark.django_db

ALIAS = {"entity_type": "entity", "confidence": "1", "occurrence_count": "1", "source": "manual", "is_active": "on"}


@pytest.fixture
def rita(db):
    client = Client(raise_request_exception=False)
    codenames = [
        f"{a}_{m}" for m in ("verb", "verbphrase", "entityalias", "phraseblock") for a in ("add", "change", "view", "delete")
    ]
    client.force_login(reviewer_user("rita", *codenames))
    return client


def verb_form(verb_name: str, phrases: list[tuple[int | None, str]], delete: tuple[int, ...] = ()) -> dict:
    data = {"name": verb_name, "domain": "wire", "is_active": "on", "phrases-TOTAL_FORMS": str(len(phrases))}
    data["phrases-INITIAL_FORMS"] = str(sum(1 for pk, _ in phrases if pk))
    for i, (pk, text) in enumerate(phrases):
        data[f"phrases-{i}-text"] = text
        if pk:
            data[f"phrases-{i}-id"] = str(pk)
            data[f"phrases-{i}-verb"] = ""  # the parent is the page's verb
        if pk in delete:
            data[f"phrases-{i}-DELETE"] = "on"
    return data


def test_a_verbs_phrases_typed_in_the_admin_are_normalized_embedded_and_matched(rita, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        added = rita.post("/admin/learning/verb/add/", verb_form("wire.send", [(None, "Send a WIRE transfer!")]))
    assert added.status_code == 302, added.content.decode()[-2000:]
    phrase = VerbPhrase.objects.get(verb__name="wire.send")
    assert phrase.normalized == normalize_phrase("Send a WIRE transfer!") != ""
    assert phrase.has_embedding and phrase.embedding_hash == text_hash(phrase.normalized)
    assert resolve(text="send a wire transfer").verb == "wire.send"  # the catalogue's exact tier sees it at once

    verb = Verb.objects.get(name="wire.send")
    edited = rita.post(
        f"/admin/learning/verb/{verb.pk}/change/",
        verb_form("wire.send", [(phrase.pk, "wire money abroad"), (None, "pay abroad")]),
    )
    assert edited.status_code == 302
    phrase.refresh_from_db()
    assert phrase.normalized == normalize_phrase("wire money abroad") and phrase.embedding_hash == text_hash(phrase.normalized)
    assert sorted(VerbPhrase.objects.values_list("normalized", flat=True)) == sorted(
        [normalize_phrase("wire money abroad"), normalize_phrase("pay abroad")]
    )

    removed = rita.post(
        f"/admin/learning/verb/{verb.pk}/change/",
        verb_form(
            "wire.send",
            [
                (phrase.pk, "wire money abroad"),
                *[(p, t) for p, t in VerbPhrase.objects.exclude(pk=phrase.pk).values_list("pk", "text")],
            ],
            delete=(phrase.pk,),
        ),
    )
    assert removed.status_code == 302 and list(VerbPhrase.objects.values_list("text", flat=True)) == ["pay abroad"]


@pytest.mark.parametrize(
    "phrases, error",
    [
        ([(None, "pay abroad"), (None, "Pay abroad!")], "are the same phrase"),
        ([(None, "\u200b\u200b")], "no words to match"),  # nothing visible
        ([(None, "!!!")], "no words to match"),
    ],
)
def test_a_phrase_twice_or_with_nothing_to_match_is_an_error_on_the_page(rita, phrases, error):
    page = rita.post("/admin/learning/verb/add/", verb_form("wire.send", phrases))
    assert page.status_code == 200 and error in page.content.decode()
    assert not Verb.objects.filter(name="wire.send").exists() and not VerbPhrase.objects.exists()


def test_a_phrase_the_verb_has_already_is_an_error_on_the_page(rita):
    rita.post("/admin/learning/verb/add/", verb_form("wire.send", [(None, "pay abroad")]))
    verb = Verb.objects.get(name="wire.send")
    (first,) = VerbPhrase.objects.values_list("pk", "text")
    page = rita.post(f"/admin/learning/verb/{verb.pk}/change/", verb_form("wire.send", [first, (None, "PAY abroad.")]))
    assert page.status_code == 200 and "already exists" in page.content.decode()
    assert VerbPhrase.objects.count() == 1


def test_an_alias_typed_in_the_admin_is_normalized_embedded_and_resolved(rita):
    added = rita.post("/admin/learning/entityalias/add/", {**ALIAS, "alias": "Big Blue", "canonical_name": "IBM"})
    assert added.status_code == 302, added.content.decode()[-2000:]
    alias = EntityAlias.objects.get()
    assert alias.normalized == normalize_phrase("Big Blue") and alias.embedding_hash == text_hash(alias.normalized)
    assert entity_alias_resolve(text="big blue")["matches"][0]["canonical_name"] == "IBM"

    second = rita.post("/admin/learning/entityalias/add/", {**ALIAS, "alias": "the red one", "canonical_name": "Oracle"})
    assert second.status_code == 302 and EntityAlias.objects.count() == 2  # a second alias no longer collides on ""
    taken = rita.post("/admin/learning/entityalias/add/", {**ALIAS, "alias": "BIG blue!", "canonical_name": "IBM"})
    assert taken.status_code == 200 and "already exists" in taken.content.decode()

    edited = rita.post(
        f"/admin/learning/entityalias/{alias.pk}/change/", {**ALIAS, "alias": "blue giant", "canonical_name": "IBM"}
    )
    assert edited.status_code == 302
    alias.refresh_from_db()
    assert alias.normalized == normalize_phrase("blue giant") and alias.embedding_hash == text_hash(alias.normalized)


def test_blocks_are_not_added_in_the_admin_and_keep_what_they_block(rita, catalogue):
    assert rita.get("/admin/learning/phraseblock/add/").status_code == 403
    block, _ = phrase_block_add(phrase="delete everything", verb_name="cbu.delete", reason="too broad")
    page = rita.get(f"/admin/learning/phraseblock/{block.pk}/change/").content.decode()
    assert 'name="phrase"' not in page and 'name="reason"' in page
    assert PhraseBlock.objects.get().normalized == normalize_phrase("delete everything")
