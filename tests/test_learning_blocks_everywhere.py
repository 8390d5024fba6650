"""A block in force keeps its verb away wherever the resolver or learning could reach it: exact tiers, the
embedder down, many blocks of one phrase, confirmations, corrections, imports; and a block of a verb on an unrelated
phrase changes nothing else. Automatic promotion never overrides what was taught on purpose or switched off."""

import json

import pytest

from common.api import Conflict
from embeddings.embedders import set_embedder
from learning.catalogue import VerbEntry
from learning.models import LearnedPhrase, LearningCandidate, Verb
from learning.resolution import resolve
from learning.services.blocks import phrase_block_add
from learning.services.candidates import candidate_approve, candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.corrections import phrase_confirmation_apply
from learning.services.phrases import learned_phrase_deactivate, learned_phrase_upsert
from tests.conftest import FailingEmbedder
from tests.test_learning_disambiguation import resolve as resolve_api
from tests.test_learning_disambiguation import select

pytestmark = pytest.mark.django_db


@pytest.fixture
def embedder_down_later():
    yield lambda: set_embedder(FailingEmbedder())
    set_embedder(None)


def test_an_exact_phrase_still_wins_when_its_verb_is_blocked_for_an_unrelated_phrase(catalogue):
    learned_phrase_upsert(phrase="list all cbus", verb=catalogue["cbu.create"], user_id="alice")
    learned_phrase_upsert(phrase="show every cbu", verb=catalogue["cbu.create"])
    phrase_block_add(phrase="send the quarterly invoice to accounting", verb_name="cbu.create")
    phrase_block_add(phrase="send the quarterly invoice to accounting", verb_name="cbu.create", user_id="zed")
    for text, user in (("list all cbus", "alice"), ("show every cbu", "zed")):
        r = resolve(text=text, user_id=user)
        assert (r.outcome, r.verb, r.explanation["rule"], r.explanation["blocks"]) == ("resolved", "cbu.create", "exact", [])


def test_with_the_embedder_down_a_verb_with_blocks_is_never_answered(catalogue, embedder_down_later):
    learned_phrase_upsert(phrase="wipe the unit", verb=catalogue["cbu.delete"], user_id="alice")
    phrase_block_add(phrase="wipe the unit now", verb_name="cbu.delete")
    phrase_block_add(phrase="list all the cbus now", verb_name="cbu.list")
    assert "cbu.delete" in resolve(text="wipe the unit", user_id="alice").explanation["blocks"]
    embedder_down_later()
    for text, verb in (("wipe the unit", "cbu.delete"), ("list all cbus", "cbu.list")):
        down = resolve(text=text, user_id="alice")  # a learned exact phrase, a catalogue exact phrase
        assert down.degraded and down.verb != verb and verb not in [c.verb for c in down.candidates]


def test_a_block_with_no_vector_of_the_model_drops_its_verb_and_says_it_was_not_compared(catalogue):
    learned_phrase_upsert(phrase="wipe the unit", verb=catalogue["cbu.delete"], user_id="alice")
    compared = phrase_block_add(phrase="wipe the unit now", verb_name="cbu.delete")[0]
    r = resolve(text="wipe the unit", user_id="alice")
    assert "cbu.delete" in r.explanation["blocks"] and r.explanation["blocks_unchecked"] == []
    # the same block as it stands right after a change of embedding model, before the backfill reaches it
    type(compared).objects.filter(pk=compared.pk).update(embedding_model="another-model")
    phrase_block_add(phrase="send the invoice to accounting", verb_name="cbu.list")
    r = resolve(text="wipe the unit", user_id="alice")
    assert r.verb != "cbu.delete" and "cbu.delete" not in [c.verb for c in r.candidates]
    # a compared block on an unrelated phrase blocks nothing here
    assert r.explanation["blocks_unchecked"] == r.explanation["blocks"] == ["cbu.delete"] and not r.degraded


def test_every_verb_blocked_for_a_phrase_is_blocked_for_its_paraphrase():
    regions = ["paris", "london", "tokyo", "berlin", "madrid", "rome", "oslo", "vienna", "dublin", "lisbon", "prague"]
    regions += ["warsaw", "athens", "cairo", "lima", "quito", "delhi", "seoul", "hanoi", "manila", "sydney", "perth"]
    entries = [
        VerbEntry(f"ops.wipe_{r}", "ops", f"Wipe {r}", f"Erase every server in {r}.", [f"wipe all servers in {r}"])
        for r in regions
    ]
    verb_catalogue_load(entries=entries)
    for entry in entries:
        phrase_block_add(phrase="wipe all the servers", verb_name=entry.name, reason="never without a ticket")
    r = resolve(text="wipe all of the servers now")
    offered = {c.verb for c in r.candidates} | {o.verb for o in r.options} | ({r.verb} if r.verb else set())
    assert not offered & {e.name for e in entries} and len(r.explanation["blocks"]) == len(entries)


def test_confirmations_and_corrections_are_refused_for_a_verb_blocked_by_paraphrase(api, catalogue, embedder_down_later):
    phrase_block_add(phrase="delete a cbu", verb_name="cbu.delete", reason="needs approval")
    assert "cbu.delete" in resolve(text="delete a cbu please", user_id="alice").explanation["blocks"]
    confirm = {"text": "delete a cbu please", "verb": "cbu.delete", "user_id": "alice"}
    correct = {"text": "delete a cbu please", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"}
    for path, body, field in (("confirm", confirm, "verb"), ("correct", correct, "correct_verb")):
        r = api.post(f"/api/v1/resolutions/{path}", body, format="json")
        assert r.status_code == 409 and r.json()["code"] == "blocked" and field in r.json()["fields"], r.json()
        assert "paraphrase" in r.json()["detail"]
    embedder_down_later()  # nothing to compare with: refused too, saying why
    r = api.post("/api/v1/resolutions/confirm", confirm, format="json")
    assert r.status_code == 409 and "could not be compared" in r.json()["detail"]
    assert not LearnedPhrase.objects.filter(normalized="delete a cbu please").exists()


def test_an_import_the_blocks_could_not_be_checked_for_is_refused(gov_api, catalogue, embedder_down_later):
    content = json.dumps(
        [{"phrase": "delete a cbu please", "verb": "cbu.delete"}, {"phrase": "list my cbus", "verb": "cbu.list"}]
    )
    phrase_block_add(phrase="delete a cbu", verb_name="cbu.delete", reason="needs approval")
    up = gov_api.post("/api/v1/learning/import", {"format": "json", "content": content, "dry_run": True}, format="json")
    assert up.status_code == 400 and up.json()["code"] == "import_invalid"
    embedder_down_later()
    down = gov_api.post("/api/v1/learning/import", {"format": "json", "content": content}, format="json")
    assert down.status_code == 400 and "could not be compared" in json.dumps(down.json())
    assert not LearnedPhrase.objects.filter(normalized__in=["delete a cbu please", "list my cbus"]).exists()


def promote(text, verb):
    """What learning from a strong click of alice's does: an automatic promotion."""
    c = candidate_record(
        input_pattern=text, suggested_output=verb, user_id="alice", source="user_disambiguation", confidence=0.95
    )
    return candidate_approve(candidate=c, automatic=True)


def test_automatic_promotion_keeps_a_confirmed_phrase_as_taught(catalogue):
    phrase_confirmation_apply(text="list cbus", verb="cbu.list", user_id="alice")
    promote("list cbus", "cbu.list")  # a click agreeing with the confirmation
    row = LearnedPhrase.objects.get(normalized="list cbus", user_id="alice")
    assert (row.verb.name, row.source) == ("cbu.list", "confirmation")
    with pytest.raises(Conflict) as refused:
        promote("list cbus", "cbu.delete")
    assert refused.value.code == "explicit_phrase"
    row.refresh_from_db()
    assert row.verb.name == "cbu.list"


def test_a_click_does_not_switch_back_on_a_phrase_a_reviewer_switched_off(api, cbus, run_tasks):
    row = learned_phrase_upsert(phrase="list all cbus", verb=Verb.objects.get(name="cbu.list"), user_id="alice", confidence=0.5)
    learned_phrase_deactivate(phrase_id=row.pk, reviewer=None, reason="wrong for this user")
    body = resolve_api(api, "list all cbus")
    assert run_tasks(select, api, body["request_id"], "cbu.list").status_code == 200
    row.refresh_from_db()
    assert row.is_active is False
    assert LearningCandidate.objects.filter(normalized="list all cbus", user_id="alice", status="pending").exists()


def test_a_block_on_the_very_text_is_compared_not_unchecked(catalogue):
    phrase_block_add(phrase="wipe the unit", verb_name="cbu.delete")
    r = resolve(text="wipe the unit", user_id="alice")
    assert r.explanation["blocks"] == ["cbu.delete"] and r.explanation["blocks_unchecked"] == []


def test_a_global_correction_the_blocks_cannot_be_compared_with_waits_for_review(api, catalogue, embedder_down_later):
    """A correction of global data only proposes a candidate: with the embedder down it is kept (the candidate's
    approval checks the blocks); a user's correction, which teaches at once, is still refused."""
    phrase_block_add(phrase="delete a cbu", verb_name="cbu.delete", reason="needs approval")
    embedder_down_later()
    body = {"text": "please remove that unit", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete"}
    r = api.post("/api/v1/resolutions/correct", body, format="json")
    assert r.status_code == 200, r.content  # before: 409, the correction lost
    candidate = LearningCandidate.objects.get(normalized="please remove that unit", user_id=None)
    assert (candidate.suggested_output, candidate.status) == ("cbu.delete", "pending")
    with pytest.raises(Conflict, match="could not be compared"):
        candidate_approve(candidate=candidate)
    assert not LearnedPhrase.objects.filter(normalized="please remove that unit").exists()

    mine = api.post("/api/v1/resolutions/correct", {**body, "user_id": "alice"}, format="json")
    assert mine.status_code == 409 and "could not be compared" in mine.json()["detail"]
    exact = api.post("/api/v1/resolutions/correct", {**body, "text": "delete a cbu"}, format="json")
    assert exact.status_code == 409 and exact.json()["code"] == "blocked"  # a block on the text itself still refuses
