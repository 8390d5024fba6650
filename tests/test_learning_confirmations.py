"""Accepted resolutions teach the user's phrases (POST /api/v1/resolutions/confirm)."""

import pytest

from learning.models import LearnedPhrase
from learning.resolution import resolve
from learning.services.blocks import phrase_block_add
from learning.services.phrases import learned_phrase_upsert

URL = "/api/v1/resolutions/confirm"


def confirm(client, text, verb, user_id="alice"):
    body = {"text": text, "verb": verb}
    if user_id is not None:
        body["user_id"] = user_id
    return client.post(URL, body, format="json")


def test_confirmation_creates_the_users_phrase_and_counts_repeats(api, catalogue):
    r = confirm(api, "Show me every client business unit", "cbu.list")
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["created"] is True and body["user_id"] == "alice"
    assert body["phrase"]["verb"] == "cbu.list" and body["phrase"]["confidence"] == pytest.approx(0.95)
    row = LearnedPhrase.objects.get(normalized="show me every client business unit", user_id="alice")
    assert row.source == "confirmation" and row.embedding is not None and row.embedding_model
    again = confirm(api, "show me every client business unit", "cbu.list").json()
    assert again["created"] is False
    assert again["phrase"]["occurrence_count"] == 2 and again["phrase"]["confidence"] == pytest.approx(1.0)
    assert confirm(api, "show me every client business unit", "cbu.list").json()["phrase"]["confidence"] == pytest.approx(1.0)
    # The user's exact tier answers it now; global data and other users are untouched.
    mine = resolve(text="show me every client business unit", user_id="alice")
    assert (mine.outcome, mine.verb, mine.candidates[0].source) == ("resolved", "cbu.list", "user_learned_exact")
    assert not LearnedPhrase.objects.filter(user_id__isnull=True).exists()
    assert resolve(text="show me every client business unit", user_id="bob").candidates[0].source != "user_learned_exact"


def test_confirmation_is_positive_evidence_that_offsets_earlier_negatives(api, catalogue):
    """Passing a verb over for a phrase lowers it nearby; accepting it for the phrase later restores it."""
    from learning.models import PhraseEvidence
    from learning.resolution import embed_query
    from learning.services.evidence import phrase_evidence_add

    text = "show me every client business unit"
    before = {c.verb: c.score for c in resolve(text=text, user_id="alice").candidates}["cbu.list"]
    vector, model, _ = embed_query(text)
    phrase_evidence_add(user_id="alice", phrase=text, verb="cbu.list", negative=0.9, vector=vector, model=model)
    assert {c.verb: c.score for c in resolve(text=text + " now", user_id="alice").candidates}["cbu.list"] < before
    assert confirm(api, text, "cbu.list").status_code == 200
    row = PhraseEvidence.objects.get(user_id="alice", normalized=text, verb="cbu.list")
    assert row.positive == pytest.approx(0.95) and row.negative == pytest.approx(0.9) and row.signal_count == 2
    assert PhraseEvidence.objects.filter(user_id__isnull=True).count() == 0


def test_confirmation_never_overrides_a_correction_a_block_or_a_switched_off_phrase(api, catalogue):
    learned_phrase_upsert(phrase="units please", verb=catalogue["cbu.delete"], user_id="alice", confidence=1.0)
    r = confirm(api, "units please", "cbu.list")
    assert r.status_code == 409 and r.json()["code"] == "conflicting_phrase"
    assert LearnedPhrase.objects.get(normalized="units please", user_id="alice").verb.name == "cbu.delete"

    off = learned_phrase_upsert(phrase="old units", verb=catalogue["cbu.list"], user_id="alice", confidence=1.0)
    LearnedPhrase.objects.filter(pk=off.pk).update(is_active=False)
    r = confirm(api, "old units", "cbu.list")
    assert r.status_code == 409 and r.json()["code"] == "inactive_phrase"
    assert LearnedPhrase.objects.get(pk=off.pk).is_active is False

    phrase_block_add(phrase="nuke units", verb_name="cbu.delete", user_id="alice")
    r = confirm(api, "nuke units", "cbu.delete")
    assert r.status_code == 409 and r.json()["code"] == "blocked"
    assert not LearnedPhrase.objects.filter(normalized="nuke units").exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": "list units", "verb": "cbu.list"}, "user_id"),
        ({"text": "   ", "verb": "cbu.list", "user_id": "alice"}, "text"),
        ({"text": "\u200b\u00ad", "verb": "cbu.list", "user_id": "alice"}, "text"),
        ({"text": "x" * 501, "verb": "cbu.list", "user_id": "alice"}, "text"),
        ({"text": "list units", "verb": "cbu.nope", "user_id": "alice"}, "verb"),
        ({"text": "list units", "verb": "cbu.list", "user_id": "bad user!"}, "user_id"),
    ],
)
def test_bad_confirmations_answer_400_and_store_nothing(api, catalogue, body, field):
    r = api.post(URL, body, format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json()["fields"]
    assert not LearnedPhrase.objects.exists()


def test_confirmation_needs_the_feedback_scope(catalogue):
    from agents.models import Scope
    from tests.conftest import make_client

    resolve_only = make_client([Scope.RESOLVE], name="resolve-only")
    assert confirm(resolve_only, "list units", "cbu.list").status_code == 403
    assert not LearnedPhrase.objects.exists()


def test_a_text_too_long_once_normalised_is_400_naming_it(api, catalogue):
    """30 characters as typed, over 500 once normalised: a clear 400 on the text, nothing stored."""
    r = confirm(api, "\ufdfa" * 30, "cbu.list")
    assert r.status_code == 400, r.json()
    assert r.json()["code"] == "too_long" and "text" in r.json()["fields"]
    assert not LearnedPhrase.objects.exists()
