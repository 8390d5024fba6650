"""Learning-governance API: candidates, stats, blocklist, scopes."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.models import Scope
from learning.models import LearnedPhrase, LearningCandidate, PhraseBlock
from learning.resolution import resolve
from learning.services.blocks import phrase_block_add, phrase_block_expire
from learning.services.candidates import candidate_record
from tests.conftest import make_client


def cand(text="spin up a new client unit", verb="cbu.create", user_id=None, times=1, **kw):
    row = None
    for _ in range(times):
        row = candidate_record(input_pattern=text, suggested_output=verb, user_id=user_id, source="test", confidence=0.5, **kw)
    return row


# --- scopes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,url,body",
    [
        ("get", "/api/v1/learning/candidates", None),
        ("post", "/api/v1/learning/candidates/1/approve", {}),
        ("post", "/api/v1/learning/candidates/1/reject", {"reason": "x"}),
        ("get", "/api/v1/learning/stats", None),
        ("post", "/api/v1/blocklist", {"phrase": "x", "verb": "cbu.delete"}),
        ("delete", "/api/v1/blocklist/1", None),
        ("post", "/api/v1/blocklist/1/expire", None),
        ("post", "/api/v1/learning/import", {"format": "json", "content": "[]"}),
    ],
)
def test_agent_key_without_governance_gets_403(api, catalogue, method, url, body):
    c = cand()
    response = getattr(api, method)(url.replace("/1/", f"/{c.pk}/"), body, format="json")
    assert response.status_code == 403
    assert "governance" in response.json()["detail"]
    c.refresh_from_db()
    assert c.status == "pending"
    assert not PhraseBlock.objects.exists() and not LearnedPhrase.objects.exists()


def test_correction_needs_feedback_scope(db, catalogue):
    client = make_client([Scope.RESOLVE], name="resolve-only")
    response = client.post(
        "/api/v1/resolutions/correct", {"text": "x", "wrong_verb": "cbu.list", "correct_verb": "cbu.create"}, format="json"
    )
    assert response.status_code == 403
    assert not LearnedPhrase.objects.exists()


def test_unauthenticated_is_401(client, catalogue):
    assert client.get("/api/v1/learning/candidates").status_code == 401


# --- candidates ---------------------------------------------------------------------


def test_list_pending_first_then_occurrences_and_filters(gov_api, catalogue):
    a = cand("open a cbu please", times=1)
    b = cand("make me a cbu", times=3)
    done = cand("remove a cbu", verb="cbu.delete", times=5)
    gov_api.post(f"/api/v1/learning/candidates/{done.pk}/reject", {"reason": "no"}, format="json")
    body = gov_api.get("/api/v1/learning/candidates").json()
    assert body["count"] == 3
    assert [r["id"] for r in body["results"]] == [b.pk, a.pk, done.pk]
    assert gov_api.get("/api/v1/learning/candidates?status=pending&min_occurrences=2").json()["results"][0]["id"] == b.pk
    assert gov_api.get("/api/v1/learning/candidates?status=pending&min_occurrences=2").json()["count"] == 1
    assert gov_api.get("/api/v1/learning/candidates?type=entity_alias").json()["count"] == 0
    page = gov_api.get("/api/v1/learning/candidates?limit=1&offset=1").json()
    assert [r["id"] for r in page["results"]] == [a.pk] and page["next"] and page["previous"] is not None
    bad = gov_api.get("/api/v1/learning/candidates?status=maybe")
    assert bad.status_code == 400 and "status" in bad.json()["fields"]


def test_approve_via_api_applies_and_resolves(gov_api, catalogue):
    c = cand("onboard a fresh legal entity")
    response = gov_api.post(f"/api/v1/learning/candidates/{c.pk}/approve", {}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "applied"
    assert response.json()["reviewed_by_agent"] == "reviewer-tool" and response.json()["reviewed_at"]
    c.refresh_from_db()
    assert c.history.latest().history_change_reason == "API, agent reviewer-tool"
    row = LearnedPhrase.objects.get(normalized="onboard a fresh legal entity")
    assert row.embedding is not None
    assert resolve(text="onboard a fresh legal entity").verb == "cbu.create"


def test_approve_without_apply(gov_api, catalogue):
    c = cand()
    response = gov_api.post(f"/api/v1/learning/candidates/{c.pk}/approve", {"apply_immediately": False}, format="json")
    assert response.json()["status"] == "approved"
    assert not LearnedPhrase.objects.exists()


def test_unknown_candidate_404(gov_api, catalogue):
    response = gov_api.post("/api/v1/learning/candidates/999999/approve", {}, format="json")
    assert response.status_code == 404
    assert response.json()["fields"] == {"id": ["No learning candidate 999999."]}
    assert gov_api.post("/api/v1/learning/candidates/999999/reject", {}, format="json").status_code == 404


def test_approving_rejected_candidate_is_409_with_status(gov_api, catalogue):
    c = cand()
    assert gov_api.post(f"/api/v1/learning/candidates/{c.pk}/reject", {"reason": "wrong"}, format="json").status_code == 200
    response = gov_api.post(f"/api/v1/learning/candidates/{c.pk}/approve", {}, format="json")
    assert response.status_code == 409
    assert response.json()["status"] == "rejected"
    assert "status" in response.json()["fields"]
    assert not LearnedPhrase.objects.exists()


def test_reject_with_blocklist_via_api(gov_api, catalogue):
    c = cand("remove a client business unit", verb="cbu.delete")
    response = gov_api.post(
        f"/api/v1/learning/candidates/{c.pk}/reject", {"reason": "dangerous", "add_to_blocklist": True}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "rejected" and body["review_reason"] == "dangerous"
    assert PhraseBlock.objects.filter(normalized="remove a client business unit", verb__name="cbu.delete").exists()
    assert "cbu.delete" not in [x.verb for x in resolve(text="remove the client business unit").candidates]


# --- stats ------------------------------------------------------------------------------


def test_stats(gov_api, catalogue):
    cand("make me a cbu", times=4)
    cand("open a cbu please", times=2)
    applied = cand("onboard a fresh legal entity")
    gov_api.post(f"/api/v1/learning/candidates/{applied.pk}/approve", {}, format="json")
    phrase_block_add(phrase="delete everything", verb_name="cbu.delete")
    expired, _ = phrase_block_add(phrase="drop it", verb_name="cbu.delete")
    PhraseBlock.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    old = cand("ancient phrase")
    LearningCandidate.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))

    week = gov_api.get("/api/v1/learning/stats?time_range=week").json()
    assert week["candidates_by_status"] == {"pending": 2, "approved": 0, "rejected": 0, "applied": 1}
    assert week["active_learned_phrases"] == 1
    assert week["active_aliases"] == 0
    assert week["active_blocklist_entries"] == 1
    assert [t["input_pattern"] for t in week["top_pending"]][:2] == ["make me a cbu", "open a cbu please"]
    assert week["top_pending"][0]["occurrence_count"] == 4
    every = gov_api.get("/api/v1/learning/stats?time_range=all").json()
    assert every["candidates_by_status"]["pending"] == 3
    assert gov_api.get("/api/v1/learning/stats?time_range=year").status_code == 400


# --- blocklist --------------------------------------------------------------------------


def test_block_create_with_expiry(gov_api, catalogue):
    response = gov_api.post(
        "/api/v1/blocklist",
        {
            "phrase": "Remove a client business unit",
            "verb": "cbu.delete",
            "reason": "too risky",
            "scope": "user",
            "user_id": "alice",
            "expires_in": "30d",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["scope"] == "user" and body["user_id"] == "alice" and body["embedded"] is True
    assert body["source"] == "api:reviewer-tool"
    block = PhraseBlock.objects.get(pk=body["id"])
    assert timedelta(days=29, hours=23) < block.expires_at - timezone.now() <= timedelta(days=30)
    assert "cbu.delete" not in [c.verb for c in resolve(text="remove the client business unit", user_id="alice").candidates]
    assert resolve(text="remove a client business unit", user_id="bob").verb == "cbu.delete"


def test_adding_a_block_in_force_again_never_weakens_it(catalogue):
    """A second tool adding the same block with an expiry and no reason neither shortens a permanent block nor drops
    its reason; the answer is 200 (nothing created). A later end extends a temporary block; an ended one starts
    again as asked (201 only for a new row)."""
    first_tool, other_tool = make_client(["governance"], name="first-tool"), make_client(["governance"], name="other-tool")
    body = {"phrase": "nuke everything", "verb": "cbu.delete"}
    created = first_tool.post("/api/v1/blocklist", {**body, "reason": "never: destructive"}, format="json")
    assert created.status_code == 201 and created.json()["expires_at"] is None
    again = other_tool.post("/api/v1/blocklist", {**body, "expires_in": "1h"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    block = PhraseBlock.objects.get()
    assert (block.expires_at, block.reason, block.source) == (None, "never: destructive", "api:first-tool")

    temporary = {"phrase": "drop a cbu", "verb": "cbu.delete"}
    first_tool.post("/api/v1/blocklist", {**temporary, "expires_in": "2d"}, format="json")
    shorter = other_tool.post("/api/v1/blocklist", {**temporary, "expires_in": "1h", "reason": "seen again"}, format="json")
    assert shorter.status_code == 200
    block = PhraseBlock.objects.get(normalized="drop a cbu")
    assert block.expires_at - timezone.now() > timedelta(days=1, hours=23) and block.reason == "seen again"
    other_tool.post("/api/v1/blocklist", {**temporary, "expires_in": "7d"}, format="json")
    block.refresh_from_db()
    assert block.expires_at - timezone.now() > timedelta(days=6, hours=23) and block.reason == "seen again"
    phrase_block_expire(block_id=block.pk)
    renewed = other_tool.post("/api/v1/blocklist", {**temporary, "expires_in": "1h"}, format="json")
    assert renewed.status_code == 200
    block.refresh_from_db()
    assert timedelta(minutes=59) < block.expires_at - timezone.now() <= timedelta(hours=1) and block.reason == ""


@pytest.mark.parametrize(
    "expiry,ok",
    [("1w", True), ("24h", True), ("90m", True), ("30x", False), ("-1d", False), ("0d", False), ("d", False), ("99999d", False)],
)
def test_block_expiry_formats(gov_api, catalogue, expiry, ok):
    response = gov_api.post(
        "/api/v1/blocklist", {"phrase": "drop a cbu", "verb": "cbu.delete", "expires_in": expiry}, format="json"
    )
    if ok:
        assert response.status_code == 201
    else:
        assert response.status_code == 400
        assert "expires_in" in response.json()["fields"]
        assert not PhraseBlock.objects.exists()


def test_block_bad_input(gov_api, catalogue):
    r = gov_api.post("/api/v1/blocklist", {"phrase": "drop a cbu", "verb": "cbu.nuke"}, format="json")
    assert r.status_code == 400 and "verb" in r.json()["fields"]
    r = gov_api.post("/api/v1/blocklist", {"phrase": "drop a cbu", "verb": "cbu.delete", "scope": "user"}, format="json")
    assert r.status_code == 400 and "user_id" in r.json()["fields"]
    r = gov_api.post("/api/v1/blocklist", {"phrase": "drop a cbu", "verb": "cbu.delete", "user_id": "alice"}, format="json")
    assert r.status_code == 400 and "user_id" in r.json()["fields"]
    r = gov_api.post("/api/v1/blocklist", {"phrase": "  ", "verb": "cbu.delete"}, format="json")
    assert r.status_code == 400
    r = gov_api.post("/api/v1/blocklist", {"phrase": "\u200b\ufeff", "verb": "cbu.delete"}, format="json")
    assert r.status_code == 400 and "phrase" in r.json()["fields"]
    assert not PhraseBlock.objects.exists()


def test_block_expire_and_delete(gov_api, catalogue):
    block, _ = phrase_block_add(phrase="remove a client business unit", verb_name="cbu.delete")
    assert resolve(text="remove a client business unit").verb != "cbu.delete"
    r = gov_api.post(f"/api/v1/blocklist/{block.pk}/expire")
    assert r.status_code == 200 and r.json()["expires_at"]
    assert resolve(text="remove a client business unit").verb == "cbu.delete"  # expired blocks stop applying
    assert PhraseBlock.objects.filter(pk=block.pk).exists()
    assert gov_api.delete(f"/api/v1/blocklist/{block.pk}").status_code == 204
    assert not PhraseBlock.objects.filter(pk=block.pk).exists()
    assert block.history.filter(history_type="-").exists()
    assert gov_api.delete(f"/api/v1/blocklist/{block.pk}").status_code == 404
    assert gov_api.post(f"/api/v1/blocklist/{block.pk}/expire").status_code == 404


def test_expired_block_stops_applying_and_purge(catalogue, capsys):
    live, _ = phrase_block_add(phrase="remove a client business unit", verb_name="cbu.delete", user_id="alice")
    gone, _ = phrase_block_add(phrase="delete a cbu", verb_name="cbu.delete", expires_at=timezone.now() + timedelta(minutes=1))
    assert resolve(text="delete a cbu").verb != "cbu.delete"
    PhraseBlock.objects.filter(pk=gone.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert resolve(text="delete a cbu").verb == "cbu.delete"
    call_command("purge_expired_blocks")
    assert "Purged 1 expired blocklist entry." in capsys.readouterr().out
    assert list(PhraseBlock.objects.values_list("pk", flat=True)) == [live.pk]
    call_command("purge_expired_blocks")
    assert "Purged 0 expired blocklist entries." in capsys.readouterr().out


def test_schema_has_no_warnings_about_governance_views(capsys, db, tmp_path):
    schema_file = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--file", str(schema_file))
    err = capsys.readouterr().err
    # The authenticator note is project-wide; everything else must be clean for these views.
    ours = [
        line
        for line in err.splitlines()
        if ("governance" in line or "LearningCandidate" in line or "Correction" in line or "Import" in line or "Block" in line)
        and "could not resolve authenticator" not in line
    ]
    assert ours == []
    schema = schema_file.read_text()
    for path in (
        "/api/v1/learning/candidates:",
        "/api/v1/learning/stats:",
        "/api/v1/blocklist:",
        "/api/v1/resolutions/correct:",
        "/api/v1/learning/import:",
    ):
        assert path in schema


def test_purge_task_is_scheduled_and_purges(catalogue, settings):
    from learning.tasks import purge_expired_blocks_task

    assert settings.CELERY_BEAT_SCHEDULE["learning-purge-expired-blocks"]["task"] == "learning.tasks.purge_expired_blocks_task"
    block, _ = phrase_block_add(phrase="drop a cbu", verb_name="cbu.delete")
    PhraseBlock.objects.filter(pk=block.pk).update(expires_at=timezone.now() - timedelta(days=1))
    assert purge_expired_blocks_task.delay().get() == 1
    assert not PhraseBlock.objects.exists()


def test_empty_query_parameters_are_errors(gov_api, catalogue):
    r = gov_api.get("/api/v1/learning/candidates?user_id=")
    assert r.status_code == 400 and "user_id" in r.json()["fields"]
    r = gov_api.get("/api/v1/learning/stats?time_range=")
    assert r.status_code == 400 and "time_range" in r.json()["fields"]


def test_a_block_phrase_too_long_once_normalised_is_400_naming_it(gov_api, catalogue):
    """30 characters as typed, over 500 once normalised: a clear 400 on the phrase, nothing stored."""
    r = gov_api.post("/api/v1/blocklist", {"phrase": "\ufdfa" * 30, "verb": "cbu.delete"}, format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["code"] == "too_long" and "phrase" in r.json()["fields"]
    assert not PhraseBlock.objects.exists()


@pytest.mark.parametrize("candidate_id", ["9223372036854775808", "99999999999999999999999"])
@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_candidate_id_no_key_can_hold_is_404_like_any_unknown_id(gov_api, catalogue, candidate_id, action):
    response = gov_api.post(f"/api/v1/learning/candidates/{candidate_id}/{action}", {}, format="json")
    assert response.status_code == 404, response.json()
    assert response.json()["fields"] == {"id": [f"No learning candidate {candidate_id}."]}


def test_a_candidate_id_no_key_can_hold_still_needs_the_governance_scope(api, catalogue):
    response = api.post("/api/v1/learning/candidates/9223372036854775808/approve", {}, format="json")
    assert response.status_code == 403


def test_expired_blocks_go_in_batches_each_with_its_history(catalogue, monkeypatch):
    """A backlog of expired blocks is deleted a batch at a time (not one DELETE of every row, each loaded with its
    vector), and each deletion stays in the block's history; a block not expired stays."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from common import db
    from learning.services.blocks import phrase_blocks_purge_expired

    monkeypatch.setattr(db, "PURGE_BATCH", 2)
    blocks = [phrase_block_add(phrase=f"drop cbu number {i}", verb_name="cbu.delete")[0] for i in range(5)]
    live, _ = phrase_block_add(phrase="remove a client business unit", verb_name="cbu.delete")
    PhraseBlock.objects.filter(pk__in=[b.pk for b in blocks]).update(expires_at=timezone.now() - timedelta(days=1))
    with CaptureQueriesContext(connection) as seen:
        assert phrase_blocks_purge_expired() == 5
    deletes = [q["sql"] for q in seen.captured_queries if q["sql"].startswith('DELETE FROM "learning_phraseblock"')]
    assert len(deletes) == 3  # 2 + 2 + 1
    assert list(PhraseBlock.objects.values_list("pk", flat=True)) == [live.pk]
    assert PhraseBlock.history.filter(history_type="-").count() == 5
