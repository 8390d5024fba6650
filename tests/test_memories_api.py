"""Memories through the API: observe, dedupe branches, retrieve, feedback, bad input."""

import pytest
from django.test import override_settings

from common.text import text_hash
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from tests.conftest import OBSERVE, OUTCOME, RETRIEVE, SEARCH, make_client, make_memory

LESSON_Q = "How do I rotate the application logs on the staging servers?"
LESSON_A = "Run logrotate with the config in /etc/logrotate.d/app and restart the app service afterwards so it reopens its files."


def observe(api, user="alice", user_message=LESSON_Q, assistant_message=LESSON_A, **meta):
    body = {"user_id": user, "user_message": user_message, "assistant_message": assistant_message}
    if meta:
        body["meta"] = meta
    return api.post(OBSERVE, body, format="json")


@pytest.mark.django_db
class TestObserve:
    def test_saved_as_candidate_with_embedding_fingerprints_and_metadata(self, api):
        r = observe(api, session_id="s1", message_id="m1", tags=["ops"], filters={"project": "atlas"})
        assert r.status_code == 200, r.json()
        body = r.json()
        assert body["decision"] == "saved" and body["evidence"]["rule"] == "new"
        m = Memory.objects.get(pk=body["memory_id"])
        assert m.status == "candidate" and m.user_id == "alice" and m.namespace == "learning"
        assert m.memory_type == "faq" and m.content.startswith("Q: How do I rotate") and "A: Run logrotate" in m.content
        assert m.tags == ["ops"] and m.metadata == {"project": "atlas"}
        assert m.source_session_id == "s1" and m.source_message_id == "m1"
        assert len(m.simhash) == 16 and m.content_sha256 == text_hash(m.content)
        assert m.embedding is not None and m.embedding_model  # embedded by the (eager) Celery task
        assert m.version == 1 and m.hits == 0 and m.streak == 0

    def test_identical_turn_is_skipped(self, api):
        first = observe(api).json()
        second = observe(api).json()
        assert second["decision"] == "skipped" and second["memory_id"] == first["memory_id"]
        assert second["evidence"]["rule"] == "exact"
        assert Memory.objects.count() == 1

    def test_same_substance_different_case_and_punctuation_is_skipped(self, api):
        first = observe(api).json()
        second = observe(api, user_message=LESSON_Q.upper(), assistant_message=LESSON_A.replace(",", "").lower()).json()
        assert second["decision"] == "skipped" and second["evidence"]["rule"] == "simhash_same_substance"
        assert second["memory_id"] == first["memory_id"]
        assert second["evidence"]["hamming"] <= 3

    def test_near_identical_text_is_merged(self, api):
        base = "Use the staging bastion host to reach the internal database, and keep the tunnel open while the migration scripts run against the replica in the eu region."
        first = observe(api, user_message="remember this please", assistant_message=base, type="pattern").json()
        changed = base.replace("internal database", "internal postgres database")
        second = observe(api, user_message="remember this please", assistant_message=changed, type="pattern").json()
        assert second["decision"] == "merged", second
        assert second["evidence"]["rule"] == "simhash" and second["evidence"]["hamming"] <= 3
        m = Memory.objects.get(pk=first["memory_id"])
        assert second["memory_id"] == m.pk and m.version == 2 and m.hits == 1
        assert m.content == changed  # the longer text wins
        assert Memory.objects.count() == 1
        # The merge is in the history, and the history still has the text it replaced.
        history = list(m.history.order_by("history_date"))
        assert [h.content for h in history] == [base, changed]
        assert history[-1].history_change_reason.startswith("merged a duplicate observation")

    def test_paraphrase_above_semantic_threshold_is_merged(self, api):
        a = "Always run the database migrations before deploying the web application to production."
        b = "Run the database migrations before you deploy the web application to production, always."
        first = observe(api, user_message="note", assistant_message=a, type="pattern").json()
        with override_settings(MEMORY_SEMANTIC_DUPLICATE_THRESHOLD=0.85):
            second = observe(api, user_message="note", assistant_message=b, type="pattern").json()
        assert second["decision"] == "merged", second
        assert second["evidence"]["rule"] == "semantic" and second["evidence"]["similarity"] >= 0.85
        assert second["memory_id"] == first["memory_id"]

    def test_semantic_merge_needs_the_same_type(self, api):
        a = "Always run the database migrations before deploying the web application to production."
        b = "Run the database migrations before you deploy the web application to production, always."
        observe(api, user_message="note", assistant_message=a, type="pattern")
        with override_settings(MEMORY_SEMANTIC_DUPLICATE_THRESHOLD=0.85):
            second = observe(api, user_message="note", assistant_message=b, type="procedure").json()
        assert second["decision"] == "saved"

    def test_contradiction_on_same_topic_makes_a_new_version(self, api):
        old = observe(
            api,
            user_message="note",
            assistant_message="The payments API request timeout should be set to 30 seconds for batch jobs.",
            type="pattern",
            topic="payments timeout",
        ).json()
        new = observe(
            api,
            user_message="note",
            assistant_message="The payments API request timeout should be set to 90 seconds for batch jobs.",
            type="pattern",
            topic="payments timeout",
        ).json()
        assert new["decision"] == "new_version", new
        assert new["evidence"]["rule"] == "contradiction" and new["evidence"]["deprecated_memory_id"] == old["memory_id"]
        old_row, new_row = Memory.objects.get(pk=old["memory_id"]), Memory.objects.get(pk=new["memory_id"])
        assert old_row.status == "deprecated" and old_row.deprecated_at is not None
        assert new_row.status == "candidate" and new_row.supersedes_id == old_row.pk and new_row.version == 2

    @pytest.mark.parametrize(
        "before,after",
        [("twelve", "four"), ("twenty-four", "forty"), ("12", "four"), ("two hundred and five", "two hundred and fifty")],
    )
    def test_numbers_in_words_contradict_like_digits(self, api, before, after):
        """ "twelve workers" then "four workers": a new version (the newer number lives), not a merge keeping the
        longer, older text."""
        text = "Run the staging import queue with {} workers during the nightly batch window."
        old = observe(api, user_message="note", assistant_message=text.format(before), type="pattern", topic="import queue")
        new = observe(api, user_message="note", assistant_message=text.format(after), type="pattern", topic="import queue")
        assert new.json()["decision"] == "new_version", new.json()
        assert Memory.objects.get(pk=old.json()["memory_id"]).status == "deprecated"
        assert f" {after} workers" in Memory.objects.get(pk=new.json()["memory_id"]).content

    def test_a_word_said_in_place_of_another_is_a_new_version_not_a_merge(self, api):
        """ "the main branch" after "the release branch": a merge would keep the longer, older text and lose the
        user's newer instruction."""
        text = "Always deploy the web application from the {} branch of the monorepo."
        old = observe(api, user_message="note", assistant_message=text.format("release"), type="pattern", topic="deploys")
        new = observe(api, user_message="note", assistant_message=text.format("main"), type="pattern", topic="deploys")
        assert new.json()["decision"] == "new_version", new.json()
        assert Memory.objects.get(pk=old.json()["memory_id"]).status == "deprecated"
        assert "main branch" in Memory.objects.get(pk=new.json()["memory_id"]).content

    def test_a_name_written_in_capitals_is_a_word_even_when_it_spells_a_stop_word(self):
        """ "the US region" and "the IT team" name something; "us" and "it" in lower case are stop words."""
        from memories.dedupe import content_words, contradicts, same_substance

        assert contradicts(
            "Always deploy the billing service to the EU region", "Always deploy the billing service to the US region"
        )
        assert contradicts("The IT team owns the VPN", "The HR team owns the VPN")
        assert "us" not in content_words("tell us the plan") and same_substance("Tell us the plan", "TELL US THE PLAN")

    def test_another_form_of_a_word_or_an_added_word_is_no_contradiction(self):
        from memories.dedupe import contradicts

        assert not contradicts("Deploy the branches from the monorepo nightly.", "Deploy the branch from the monorepo nightly.")
        assert not contradicts("Deploying the app from the monorepo nightly.", "Deploy the app from the monorepo nightly.")
        assert not contradicts("Deploy the web app from the monorepo nightly.", "Deploy the app from the monorepo nightly.")

    def test_the_same_number_in_digits_and_in_words_is_no_contradiction(self):
        from memories.dedupe import _numbers, contradicts

        assert _numbers("twelve workers") == _numbers("12 workers") == ["12"]
        assert _numbers("one thousand two hundred and thirty-four") == ["1234"]
        assert _numbers("pick one of three, then four five") == ["1", "3", "4", "5"]
        assert not contradicts("Run the queue with 12 workers tonight.", "Run the queue with twelve workers tonight.")

    def test_negation_contradiction(self, api):
        observe(
            api,
            user_message="note",
            assistant_message="Enable the query cache on the reporting database replicas for faster dashboards.",
            type="pattern",
            topic="reporting cache",
        )
        r = observe(
            api,
            user_message="note",
            assistant_message="Do not enable the query cache on the reporting database replicas for faster dashboards.",
            type="pattern",
            topic="reporting cache",
        ).json()
        assert r["decision"] == "new_version"

    def test_dedupe_is_per_user(self, api):
        observe(api, user="alice")
        r = observe(api, user="bob").json()
        assert r["decision"] == "saved"
        assert Memory.objects.filter(user_id="bob").count() == 1

    def test_blocked_secret_goes_to_quarantine_redacted_and_is_not_echoed(self, api):
        secret = "AKIAIOSFODNN7EXAMPLQ"
        r = observe(
            api,
            user_message="How do I reach the S3 bucket?",
            assistant_message=f"Use the access key {secret} with the deploy role.",
        )
        body = r.json()
        assert r.status_code == 200 and body["decision"] == "blocked" and body["memory_id"] is None
        assert body["evidence"]["reason"] == "secret" and "aws_access_key" in body["evidence"]["kinds"]
        assert secret not in r.content.decode()
        q = MemoryQuarantine.objects.get(pk=body["evidence"]["quarantine_id"])
        assert secret not in q.redacted_preview and "[REDACTED:aws_access_key]" in q.redacted_preview
        assert q.reason == "secret" and q.status == "pending" and q.user_id == "alice"
        assert Memory.objects.count() == 0

    def test_secret_in_tags_or_filters_is_blocked_too(self, api):
        r = observe(api, filters={"note": "password=Hunter2Hunter2"}).json()
        assert r["decision"] == "blocked"
        q = MemoryQuarantine.objects.get()
        assert "Hunter2Hunter2" not in str(q.metadata)

    def test_unstable_and_short_are_blocked(self, api):
        r = observe(
            api, user_message="What is the EUR rate?", assistant_message="Right now the transfer fee is €4.50 per payment."
        ).json()
        assert r["decision"] == "blocked" and r["evidence"]["reason"] == "unstable"
        r = observe(api, user_message="note", assistant_message="Use tabs.", type="pattern").json()
        assert r["decision"] == "blocked" and r["evidence"]["reason"] == "too_short"
        # Chatter on both sides is not a lesson at all: nothing is stored, not even in the quarantine.
        r = observe(api, user_message="ok?", assistant_message="Yes.", type="pattern").json()
        assert r["decision"] == "skipped" and r["evidence"]["rule"] == "nothing_reusable"


@pytest.mark.django_db
class TestBadInput:
    @pytest.mark.parametrize(
        "body, field",
        [
            ({"user_message": "q?", "assistant_message": "a"}, "user_id"),
            ({"user_id": "alice", "user_message": "", "assistant_message": LESSON_A}, "user_message"),
            ({"user_id": "alice", "user_message": LESSON_Q, "assistant_message": "   "}, "assistant_message"),
            ({"user_id": "alice", "user_message": "x" * 1_000_000, "assistant_message": LESSON_A}, "user_message"),
            ({"user_id": "alice", "user_message": LESSON_Q, "assistant_message": LESSON_A, "meta": {"tags": "ops"}}, "meta.tags"),
            (
                {"user_id": "alice", "user_message": LESSON_Q, "assistant_message": LESSON_A, "meta": {"tags": [1, {"a": 2}]}},
                "meta.tags",
            ),
            (
                {"user_id": "alice", "user_message": LESSON_Q, "assistant_message": LESSON_A, "meta": {"type": "poem"}},
                "meta.type",
            ),
            ({"user_id": "bad id!", "user_message": LESSON_Q, "assistant_message": LESSON_A}, "user_id"),
            ({"user_id": 42, "user_message": LESSON_Q, "assistant_message": LESSON_A}, "user_id"),
            ({"user_id": "alice", "user_message": LESSON_Q, "assistant_message": "ok\u0000ok is fine"}, "assistant_message"),
            ({"user_id": "alice", "user_message": LESSON_Q, "assistant_message": LESSON_A, "colour": "red"}, "colour"),
        ],
    )
    def test_observe_refuses_with_field_and_stores_nothing(self, api, body, field):
        r = api.post(OBSERVE, body, format="json")
        assert r.status_code == 400, r.json()
        assert any(k.startswith(field) for k in r.json()["fields"]), r.json()
        assert Memory.objects.count() == 0 and MemoryQuarantine.objects.count() == 0

    def test_body_over_the_api_limit_is_refused_before_parsing(self, api):
        r = observe(api, assistant_message="y" * (2**20 + 10))
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
        assert Memory.objects.count() == 0 and MemoryQuarantine.objects.count() == 0

    def test_retrieve_needs_user_and_query(self, api):
        r = api.post(RETRIEVE, {"query": "logs"}, format="json")
        assert r.status_code == 400 and "user_id" in r.json()["fields"]
        r = api.post(RETRIEVE, {"user_id": "alice", "query": ""}, format="json")
        assert r.status_code == 400 and "query" in r.json()["fields"]
        r = api.post(RETRIEVE, {"user_id": "alice", "query": "x", "filters": {"tags": "ops"}}, format="json")
        assert r.status_code == 400 and "filters.tags" in r.json()["fields"]
        assert MemoryRetrieval.objects.count() == 0

    def test_feedback_unknown_and_foreign_ids_answer_404_and_change_nothing(self, api):
        mine = make_memory(user="alice")
        theirs = make_memory(user="bob")
        for ids in ([mine.pk, theirs.pk], [theirs.pk], [999999]):
            r = api.post(OUTCOME, {"user_id": "alice", "memory_ids": ids, "outcome": "failure"}, format="json")
            assert r.status_code == 404, r.json()
            assert "memory_ids" in r.json()["fields"]
        mine.refresh_from_db()
        theirs.refresh_from_db()
        assert mine.status == "candidate" and theirs.status == "candidate"
        # a foreign id answers exactly like an unknown one: existence does not leak
        a = api.post(OUTCOME, {"user_id": "alice", "memory_ids": [theirs.pk], "outcome": "success"}, format="json").json()
        b = api.post(OUTCOME, {"user_id": "alice", "memory_ids": [888888], "outcome": "success"}, format="json").json()
        assert a["code"] == b["code"] == "not_found"

    @pytest.mark.parametrize("ids", ["first", [], ["1"], [0], [True], {"id": 1}])
    def test_feedback_malformed_ids(self, api, ids):
        r = api.post(OUTCOME, {"user_id": "alice", "memory_ids": ids, "outcome": "success"}, format="json")
        assert r.status_code == 400 and "memory_ids" in r.json()["fields"]

    def test_search_refuses_coerced_types(self, api):
        for body, field in [
            ({"user_id": "alice", "query": "x", "include_deprecated": "yes"}, "include_deprecated"),
            ({"user_id": "alice", "query": "x", "limit": "5"}, "limit"),
            ({"user_id": "alice", "query": "x", "mode": "fuzzy"}, "mode"),
        ]:
            r = api.post(SEARCH, body, format="json")
            assert r.status_code == 400 and field in r.json()["fields"], r.json()

    def test_feedback_last_without_retrieval(self, api):
        r = api.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "success"}, format="json")
        assert r.status_code == 404 and "memory_ids" in r.json()["fields"]

    def test_scopes(self, db):
        from tests.conftest import make_client

        resolve_only = make_client(["resolve"], name="reader")
        assert observe(resolve_only).status_code == 403
        assert (
            resolve_only.post(OUTCOME, {"user_id": "a", "memory_ids": "last", "outcome": "success"}, format="json").status_code
            == 403
        )
        feedback_only = make_client(["feedback"], name="writer")
        assert feedback_only.post(RETRIEVE, {"user_id": "a", "query": "x"}, format="json").status_code == 403
        assert feedback_only.post(SEARCH, {"user_id": "a", "query": "x"}, format="json").status_code == 403


def _shared_and_private():
    from agents.authentication import verified_keys_forget

    shared = make_client(["resolve", "feedback", "governance"], name="agent-shared")
    private = make_client(["resolve", "feedback", "governance"], name="agent-private")
    private.agent.private_user_data = True
    private.agent.save()
    verified_keys_forget()
    return shared, private


ROTATION = {
    "user_id": "alice",
    "user_message": "How do I rotate the staging database credentials safely?",
    "assistant_message": "Use the vault rotate command for the staging role, then restart the workers so they pick up the new lease.",
    "meta": {"type": "procedure", "topic": "credential rotation"},
}


def test_a_private_agent_changes_no_memory_it_cannot_read(db):
    """An agent with private user data reads only the memories it wrote; an outcome for another agent's memory,
    by id, by "last" or by the user's reply, is answered like an unknown id and changes nothing."""

    shared, private = _shared_and_private()
    mid = shared.post("/api/v1/memories/observe", ROTATION, format="json").json()["memory_id"]
    query = {"user_id": "alice", "query": "rotate staging database credentials"}
    assert private.post("/api/v1/memories/retrieve", query, format="json").json()["items"] == []
    by_id = private.post(
        "/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": [mid], "outcome": "failure"}, format="json"
    )
    assert by_id.status_code == 404 and by_id.json()["fields"] == {"memory_ids": [f"Unknown memory id(s): {mid}."]}
    assert [i["id"] for i in shared.post("/api/v1/memories/retrieve", query, format="json").json()["items"]] == [mid]
    last = private.post(
        "/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": "last", "outcome": "failure"}, format="json"
    )
    assert last.status_code == 404
    reply = {"user_id": "alice", "user_message": "that didn't work", "assistant_message": "Sorry about that."}
    assert private.post("/api/v1/memories/observe", reply, format="json").status_code == 200
    assert Memory.objects.get(pk=mid).status != "deprecated"
    mine = shared.post("/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": [mid], "outcome": "failure"}, format="json")
    assert mine.status_code == 200 and Memory.objects.get(pk=mid).status == "deprecated"  # its own agent still can
