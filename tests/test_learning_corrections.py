"""Corrections (POST /api/v1/resolutions/correct): confidence decay and boost."""

import threading

import pytest
from django.db import connection

from learning.models import LearnedPhrase, LearningCandidate, Verb
from learning.resolution import resolve
from learning.services.corrections import phrase_correction_apply
from learning.services.phrases import learned_phrase_upsert


def correct(client, text, wrong, right, user_id=None):
    body = {"text": text, "wrong_verb": wrong, "correct_verb": right}
    if user_id:
        body["user_id"] = user_id
    return client.post("/api/v1/resolutions/correct", body, format="json")


def test_user_correction_creates_user_phrase_and_resolves_next_time(api, catalogue):
    text = "wipe out this client unit"
    first = resolve(text=text, user_id="alice")
    assert first.verb != "cbu.list"
    r = correct(api, text, first.verb or "cbu.delete", "cbu.list", user_id="alice")
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["scope"] == "user" and body["created"] is True
    assert body["phrase"]["verb"] == "cbu.list" and body["phrase"]["confidence"] == pytest.approx(1.0)
    row = LearnedPhrase.objects.get(normalized=text, user_id="alice")
    assert row.embedding is not None
    assert resolve(text=text, user_id="alice").verb == "cbu.list"
    # Global data and other users are untouched.
    assert not LearnedPhrase.objects.filter(user_id__isnull=True).exists()
    assert resolve(text=text, user_id="bob").verb != "cbu.list"


def test_boost_adds_and_caps(api, catalogue, settings):
    learned_phrase_upsert(phrase="show the units", verb=catalogue["cbu.list"], user_id="alice", confidence=0.5)
    body = correct(api, "show the units", "cbu.delete", "cbu.list", user_id="alice").json()
    assert body["created"] is False
    assert body["phrase"]["confidence"] == pytest.approx(0.7)
    assert body["phrase"]["occurrence_count"] == 2
    for _ in range(3):
        body = correct(api, "show the units", "cbu.delete", "cbu.list", user_id="alice").json()
    assert body["phrase"]["confidence"] == pytest.approx(1.0)  # capped
    settings.LEARNING_CORRECTION_CAP = 0.9
    LearnedPhrase.objects.filter(user_id="alice").update(confidence=0.85)
    assert correct(api, "show the units", "cbu.delete", "cbu.list", user_id="alice").json()["phrase"][
        "confidence"
    ] == pytest.approx(0.9)


def test_decay_multiplies_and_floors_semantic_anchors(api, catalogue):
    # Alice taught "get rid of the business unit" -> cbu.list (a mistake); a near paraphrase is corrected to cbu.delete.
    anchor = learned_phrase_upsert(
        phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="alice", confidence=1.0
    )
    body = correct(api, "get rid of that business unit", "cbu.list", "cbu.delete", user_id="alice").json()
    assert [d["id"] for d in body["decayed"]] == [anchor.pk]
    anchor.refresh_from_db()
    assert anchor.confidence == pytest.approx(0.7)
    assert anchor.verb.name == "cbu.list"  # decayed, not re-pointed
    LearnedPhrase.objects.filter(pk=anchor.pk).update(confidence=0.12)
    correct(api, "get rid of that business unit", "cbu.list", "cbu.delete", user_id="alice")
    anchor.refresh_from_db()
    assert anchor.confidence == pytest.approx(0.1)  # floor
    correct(api, "get rid of that business unit", "cbu.list", "cbu.delete", user_id="alice")
    anchor.refresh_from_db()
    assert anchor.confidence == pytest.approx(0.1)
    assert anchor.history.filter(history_change_reason="correction").count() >= 3


def test_decay_spares_other_examples_of_the_wrong_verb(api, catalogue, embed):
    """Only near-paraphrases of the corrected text conflict with it; other phrases of the wrong verb are its own examples."""
    near = learned_phrase_upsert(
        phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="alice", confidence=1.0
    )
    other = learned_phrase_upsert(phrase="show my business units", verb=catalogue["cbu.list"], user_id="alice", confidence=1.0)
    text = "get rid of that business unit"
    similarity = float(embed(text) @ embed("show my business units"))
    assert 0.5 < similarity < 0.85  # within the old neighbourhood (the learned threshold), outside the decay one
    body = correct(api, text, "cbu.list", "cbu.delete", user_id="alice").json()
    assert [d["id"] for d in body["decayed"]] == [near.pk]
    other.refresh_from_db()
    assert other.confidence == pytest.approx(1.0) and other.verb.name == "cbu.list"


def test_correction_is_positive_evidence_for_the_right_verb(api, catalogue):
    from learning.models import PhraseEvidence

    correct(api, "wipe out this client unit", "cbu.list", "cbu.delete", user_id="alice")
    row = PhraseEvidence.objects.get(user_id="alice", normalized="wipe out this client unit")
    assert (row.verb, row.positive, row.negative) == ("cbu.delete", pytest.approx(1.0), 0.0)
    assert row.embedding is not None


def test_exact_wrong_user_row_decays_then_is_repointed(api, catalogue):
    row = learned_phrase_upsert(phrase="drop the unit", verb=catalogue["cbu.list"], user_id="alice", confidence=1.0)
    body = correct(api, "drop the unit", "cbu.list", "cbu.delete", user_id="alice").json()
    row.refresh_from_db()
    assert row.verb.name == "cbu.delete" and row.confidence == pytest.approx(1.0) and row.occurrence_count == 1
    history = list(row.history.order_by("history_date").values_list("verb_id", "confidence"))
    assert (catalogue["cbu.list"].pk, pytest.approx(0.7)) in history  # the decayed wrong mapping is in the audit trail
    assert body["phrase"]["verb"] == "cbu.delete"
    assert resolve(text="drop the unit", user_id="alice").verb == "cbu.delete"


def test_user_decay_is_isolated(api, catalogue):
    glob = learned_phrase_upsert(phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id=None)
    bob = learned_phrase_upsert(phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="bob")
    alice = learned_phrase_upsert(phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="alice")
    correct(api, "get rid of that business unit", "cbu.list", "cbu.delete", user_id="alice")
    correct(api, "get rid of the business unit", "cbu.list", "cbu.delete", user_id="alice")
    for row in (glob, bob):
        before = (row.verb_id, row.confidence, row.occurrence_count, row.updated_at)
        row.refresh_from_db()
        assert (row.verb_id, row.confidence, row.occurrence_count, row.updated_at) == before
    alice.refresh_from_db()
    assert alice.verb.name == "cbu.delete"
    assert not LearningCandidate.objects.exists()


def test_global_correction_moves_counts_and_records_candidate(api, catalogue):
    right = learned_phrase_upsert(phrase="list the units", verb=catalogue["cbu.list"])
    LearnedPhrase.objects.filter(pk=right.pk).update(occurrence_count=5)
    body = correct(api, "list the units", "cbu.delete", "cbu.list").json()
    assert body["scope"] == "global" and body["phrase"]["occurrence_count"] == 6 and body["candidate_id"] is None
    wrong = learned_phrase_upsert(phrase="trash the units", verb=catalogue["cbu.list"])
    LearnedPhrase.objects.filter(pk=wrong.pk).update(occurrence_count=1)
    body = correct(api, "trash the units", "cbu.list", "cbu.delete").json()
    assert body["phrase"]["occurrence_count"] == 0 and body["phrase"]["verb"] == "cbu.list"
    body = correct(api, "trash the units", "cbu.list", "cbu.delete").json()
    assert body["phrase"]["occurrence_count"] == 0  # never below zero
    cand = LearningCandidate.objects.get(pk=body["candidate_id"])
    assert (cand.suggested_output, cand.previous_output, cand.occurrence_count, cand.user_id) == (
        "cbu.delete",
        "cbu.list",
        2,
        None,
    )
    body = correct(api, "a brand new phrase", "cbu.list", "cbu.delete").json()
    assert body["phrase"] is None and body["candidate_id"]


def test_correction_bad_input(api, catalogue):
    assert correct(api, "x", "cbu.nope", "cbu.list").status_code == 400
    r = correct(api, "x", "cbu.list", "cbu.list")
    assert r.status_code == 400 and "correct_verb" in r.json()["fields"]
    r = correct(api, "   ", "cbu.delete", "cbu.list", user_id="alice")
    assert r.status_code == 400
    r = correct(api, "\u200b\u2060", "cbu.delete", "cbu.list", user_id="alice")
    assert r.status_code == 400 and "text" in r.json()["fields"]
    r = correct(api, "x", "cbu.delete", "cbu.list", user_id="bad id!")
    assert r.status_code == 400 and "user_id" in r.json()["fields"]
    assert not LearnedPhrase.objects.exists()


def _hammer(n, fn):
    errors, barrier = [], threading.Barrier(n)

    def work():
        try:
            barrier.wait()
            fn()
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.django_db(transaction=True)
def test_50_concurrent_user_corrections_lose_no_update(catalogue, settings):
    settings.LEARNING_CORRECTION_BOOST = 0.01
    settings.LEARNING_CORRECTION_START = 0.29  # created at 0.30
    n = 50
    errors = _hammer(
        n,
        lambda: phrase_correction_apply(text="tally my units", wrong_verb="cbu.delete", correct_verb="cbu.list", user_id="alice"),
    )
    assert errors == []
    row = LearnedPhrase.objects.get(normalized="tally my units", user_id="alice")
    assert row.occurrence_count == n  # one creation + 49 boosts
    assert row.confidence == pytest.approx(0.30 + 0.01 * (n - 1))
    assert LearnedPhrase.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_50_concurrent_global_corrections_exact_counts(catalogue):
    right = learned_phrase_upsert(phrase="list the units", verb=Verb.objects.get(name="cbu.list"))
    wrong = learned_phrase_upsert(phrase="trash the units", verb=Verb.objects.get(name="cbu.list"))
    LearnedPhrase.objects.filter(pk=right.pk).update(occurrence_count=10)
    LearnedPhrase.objects.filter(pk=wrong.pk).update(occurrence_count=100)

    def one(i):
        if i % 2:
            phrase_correction_apply(text="list the units", wrong_verb="cbu.delete", correct_verb="cbu.list", user_id=None)
        else:
            phrase_correction_apply(text="trash the units", wrong_verb="cbu.list", correct_verb="cbu.delete", user_id=None)

    counter = iter(range(50))
    lock = threading.Lock()

    def next_one():
        with lock:
            i = next(counter)
        one(i)

    assert _hammer(50, next_one) == []
    right.refresh_from_db()
    wrong.refresh_from_db()
    assert right.occurrence_count == 10 + 25
    assert wrong.occurrence_count == 100 - 25
    cand = LearningCandidate.objects.get()
    assert cand.occurrence_count == 25 and cand.suggested_output == "cbu.delete"


@pytest.mark.django_db(transaction=True)
def test_50_concurrent_decays_of_one_anchor(catalogue, settings):
    settings.LEARNING_CORRECTION_DECAY = 0.99
    settings.LEARNING_CORRECTION_FLOOR = 0.0
    anchor = learned_phrase_upsert(phrase="get rid of the business unit", verb=Verb.objects.get(name="cbu.list"), user_id="alice")
    texts = [f"get rid of that business unit {suffix}" for suffix in ["now"] * 50]
    it, lock = iter(texts), threading.Lock()

    def go():
        with lock:
            text = next(it)
        phrase_correction_apply(text=text, wrong_verb="cbu.list", correct_verb="cbu.delete", user_id="alice")

    assert _hammer(50, go) == []
    anchor.refresh_from_db()
    assert anchor.confidence == pytest.approx(0.99**50)


def test_a_correction_overrules_what_the_wrong_click_taught_near_the_text(
    api, cbus, django_capture_on_commit_callbacks, written_for_floors
):
    """The user clicked the wrong option, then corrected it: a close paraphrase must not keep the right verb held down
    (the click's evidence on the text's variants) nor the wrong verb lifted."""
    from django.db.models import F

    from learning.models import PhraseEvidence

    body = api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    assert body["outcome"] == "ambiguous" and "cbu.show" in [o["verb"] for o in body["options"]]
    with django_capture_on_commit_callbacks(execute=True):
        picked = api.post(f"/api/v1/disambiguations/{body['request_id']}/select", {"selected_verb": "cbu.show"}, format="json")
    assert picked.status_code == 200
    near = api.post("/api/v1/resolve", {"text": "list all cbu", "user_id": "alice"}, format="json").json()
    assert near["explanation"]["penalties"].get("cbu.list", 0) > 0  # what the click taught
    before = (
        PhraseEvidence.objects.filter(user_id="alice", verb="cbu.list", negative__gt=F("positive")).count(),
        PhraseEvidence.objects.filter(user_id="alice", verb="cbu.show", positive__gt=F("negative")).count(),
    )
    fix = {"text": "list all cbus", "wrong_verb": "cbu.show", "correct_verb": "cbu.list", "user_id": "alice"}
    assert api.post("/api/v1/resolutions/correct", fix, format="json").status_code == 200
    after = api.post("/api/v1/resolve", {"text": "list all cbu", "user_id": "alice"}, format="json").json()
    # near-paraphrases of the corrected text are overruled; farther evidence still counts, weighted by its distance
    assert after["explanation"]["penalties"].get("cbu.list", 0) < 0.05 < near["explanation"]["penalties"]["cbu.list"]
    assert after.get("verb") == "cbu.list" or "cbu.list" in [o["verb"] for o in after.get("options", [])]
    held_down = PhraseEvidence.objects.filter(user_id="alice", verb="cbu.list", negative__gt=F("positive"))
    lifted = PhraseEvidence.objects.filter(user_id="alice", verb="cbu.show", positive__gt=F("negative"))
    assert held_down.count() < before[0] and lifted.count() < before[1]  # the variants near the text; far ones stay
    untouched = api.post("/api/v1/resolve", {"text": "list all cbu", "user_id": "bob"}, format="json").json()
    assert untouched["explanation"]["penalties"] == {}  # another user's evidence is not theirs


@pytest.mark.parametrize("user_id", ["alice", None])
def test_a_correction_text_too_long_once_normalised_is_400_naming_it(api, catalogue, user_id):
    """30 characters as typed, over 500 once normalised: a clear 400 on the text, nothing stored."""
    r = correct(api, "\ufdfa" * 30, "cbu.delete", "cbu.list", user_id=user_id)
    assert r.status_code == 400, r.json()
    assert r.json()["code"] == "too_long" and "text" in r.json()["fields"]
    assert not LearnedPhrase.objects.exists() and not LearningCandidate.objects.exists()
