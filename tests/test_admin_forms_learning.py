"""Learning admin forms: bulk candidate approval acknowledges conflicts, learned phrases keep text and vector in step,
fitted profiles change behind a confirmation and a retired one is not put live again."""

import pytest

from common.text import normalize_phrase
from learning.models import FittedResolutionProfile, LearnedPhrase, LearningCandidate
from learning.services.candidates import candidate_record
from learning.services.phrases import learned_phrase_upsert
from tests.conftest import reviewer_user

CANDIDATES = "/admin/learning/learningcandidate/"
PHRASES = "/admin/learning/learnedphrase/"
PROFILES = "/admin/learning/fittedresolutionprofile/"


@pytest.fixture
def reviewer(client, db):
    client.force_login(reviewer_user("rita", "view_learningcandidate", "change_learningcandidate", "review_learningcandidate"))
    return client


@pytest.fixture
def conflicting(catalogue):
    """A global candidate for a text that a learned phrase already maps to another verb."""
    learned_phrase_upsert(phrase="wipe the unit", verb=catalogue["cbu.list"])
    return candidate_record(
        input_pattern="wipe the unit", suggested_output="cbu.delete", user_id=None, source="test", confidence=0.6
    )


def test_bulk_approve_with_a_conflict_needs_acknowledgement(reviewer, conflicting):
    selected = {"action": "approve_selected", "_selected_action": [conflicting.pk]}
    page = reviewer.post(CANDIDATES, selected).content.decode()
    assert 'id="conflict-warning"' in page and 'name="acknowledged"' in page
    assert "conflicts: learned phrase (manual) of global → cbu.list" in page

    refused = reviewer.post(CANDIDATES, {**selected, "post": "yes"})
    assert refused.status_code == 400 and "acknowledge the conflicts" in refused.content.decode()
    conflicting.refresh_from_db()
    assert conflicting.status == LearningCandidate.Status.PENDING

    done = reviewer.post(CANDIDATES, {**selected, "post": "yes", "acknowledged": "1"}, follow=True)
    assert "Approved and applied 1 candidate" in done.content.decode()
    conflicting.refresh_from_db()
    assert conflicting.status == LearningCandidate.Status.APPLIED


def test_bulk_approve_without_conflict_needs_no_acknowledgement(reviewer, catalogue):
    c = candidate_record(
        input_pattern="spin up a unit", suggested_output="cbu.create", user_id=None, source="test", confidence=0.6
    )
    page = reviewer.post(CANDIDATES, {"action": "approve_selected", "_selected_action": [c.pk]}).content.decode()
    assert 'name="acknowledged"' not in page
    reviewer.post(CANDIDATES, {"action": "approve_selected", "_selected_action": [c.pk], "post": "yes"})
    c.refresh_from_db()
    assert c.status == LearningCandidate.Status.APPLIED


@pytest.mark.parametrize("value", ["²", "٣", "99999999999999999999", "-1", "x"])
def test_min_occurrences_filter_odd_values(reviewer, catalogue, value):
    candidate_record(input_pattern="spin up a unit", suggested_output="cbu.create", user_id=None, source="test", confidence=0.6)
    assert reviewer.get(CANDIDATES, {"min_occurrences": value}).status_code == 200


def test_learned_phrase_cannot_be_added_in_admin(admin_client, catalogue):
    assert admin_client.get(PHRASES + "add/").status_code == 403
    verb = catalogue["cbu.list"]
    response = admin_client.post(
        PHRASES + "add/", {"phrase": "Probe Phrase", "verb": verb.pk, "confidence": "0.9", "occurrence_count": "1"}
    )
    assert response.status_code == 403 and not LearnedPhrase.objects.exists()


def test_learned_phrase_text_verb_user_and_confidence_are_read_only(admin_client, catalogue):
    row = learned_phrase_upsert(phrase="show the units", verb=catalogue["cbu.list"])
    embedding = list(row.embedding)
    page = admin_client.get(f"{PHRASES}{row.pk}/change/").content.decode()
    assert 'name="phrase"' not in page and 'name="verb"' not in page and 'name="user_id"' not in page
    response = admin_client.post(
        f"{PHRASES}{row.pk}/change/",
        {
            "phrase": "default where is my parcel",
            "verb": catalogue["cbu.delete"].pk,
            "user_id": "mallory",
            "confidence": "0.8",
            "occurrence_count": "3",
            "source": "manual",
            "is_active": "on",
            "agent": "",
        },
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.phrase, row.verb.name, row.user_id, row.confidence) == ("show the units", "cbu.list", None, 1.0)
    assert row.normalized == normalize_phrase(row.phrase) and list(row.embedding) == embedding


def _profile(status, model="all-MiniLM-L6-v2-onnx-int8", threshold=0.61):
    return FittedResolutionProfile.objects.create(
        embedding_model=model,
        resolve_threshold=threshold,
        margin=0.05,
        max_wrong_pct=3.0,
        gold_count=40,
        train_count=30,
        held_out_count=10,
        baseline={"resolve_threshold": 0.55, "margin": 0.04},
        status=status,
    )


def test_profile_activate_needs_confirmation(admin_client):
    row = _profile(FittedResolutionProfile.Status.PROPOSED)
    page = admin_client.post(PROFILES, {"action": "activate", "_selected_action": [row.pk]})
    html = page.content.decode()
    assert page.status_code == 200 and 'name="post" value="yes"' in html
    assert "resolution threshold 0.55 → 0.610, margin 0.04 → 0.050" in html
    row.refresh_from_db()
    assert row.status == FittedResolutionProfile.Status.PROPOSED
    admin_client.post(PROFILES, {"action": "activate", "_selected_action": [row.pk], "post": "yes"})
    row.refresh_from_db()
    assert row.status == FittedResolutionProfile.Status.ACTIVE and row.activated_by is not None


def test_retired_profile_is_not_put_live_again(admin_client):
    retired = _profile(FittedResolutionProfile.Status.RETIRED)
    live = _profile(FittedResolutionProfile.Status.ACTIVE, threshold=0.7)
    for data in ({}, {"post": "yes"}):
        done = admin_client.post(PROFILES, {"action": "activate", "_selected_action": [retired.pk], **data}, follow=True)
        assert "is retired and stays out of service" in done.content.decode()
    retired.refresh_from_db()
    live.refresh_from_db()
    assert retired.status == FittedResolutionProfile.Status.RETIRED and live.status == FittedResolutionProfile.Status.ACTIVE


def test_profile_retire_needs_confirmation(admin_client):
    live = _profile(FittedResolutionProfile.Status.ACTIVE)
    page = admin_client.post(PROFILES, {"action": "retire", "_selected_action": [live.pk]})
    assert page.status_code == 200 and "thresholds apply again for" in page.content.decode()
    live.refresh_from_db()
    assert live.status == FittedResolutionProfile.Status.ACTIVE
    admin_client.post(PROFILES, {"action": "retire", "_selected_action": [live.pk], "post": "yes"})
    live.refresh_from_db()
    assert live.status == FittedResolutionProfile.Status.RETIRED


def test_retiring_profiles_reports_each_and_refuses_the_retired_ones(admin_client):
    live = _profile(FittedResolutionProfile.Status.ACTIVE)
    retired = _profile(FittedResolutionProfile.Status.RETIRED, threshold=0.5)
    page = admin_client.post(PROFILES, {"action": "retire", "_selected_action": [live.pk, retired.pk]})
    html = page.content.decode()
    assert "skipped: already retired" in html and "thresholds apply again for" in html
    assert 'name="reason"' not in html  # retiring asks no reason
    done = admin_client.post(
        PROFILES, {"action": "retire", "_selected_action": [live.pk, retired.pk], "post": "yes"}, follow=True
    ).content.decode()
    assert "Retired: 1." in done and f"#{retired.pk}: already retired" in done
    live.refresh_from_db()
    assert live.status == FittedResolutionProfile.Status.RETIRED
