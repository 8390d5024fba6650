"""Memories from real-looking conversations: what the user said or decided is kept (never the assistant's
acknowledgement), later turns report outcomes on the memories used, skip/merge decisions are stored with their
evidence, and a memory stored without its vector says so in a header."""

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

import memories.tasks
from memories.extraction import extract_deterministic
from memories.models import Memory, MemoryWriteDecision
from memories.outcomes import outcome_detect
from tests.conftest import OBSERVE, RETRIEVE, make_memory, seed_memories


def observe(api, user_message, assistant_message, user="alice", **meta):
    body = {"user_id": user, "user_message": user_message, "assistant_message": assistant_message}
    if meta:
        body["meta"] = meta
    response = api.post(OBSERVE, body, format="json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def retrieve(api, query, user="alice"):
    response = api.post(RETRIEVE, {"user_id": user, "query": query}, format="json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


# --- the extractor keeps the user's side ----------------------------------------------------


class TestExtractorKeepsWhatTheUserSaid:
    def test_preference_with_an_acknowledgement_that_restates_it(self):
        a = extract_deterministic(
            user_message="I'm flying to Tokyo for two weeks in April, so please plan my meetings around the Japan trip.",
            assistant_message="Got it, I'll note your April travel to Japan.",
        )
        assert a.content == "I'm flying to Tokyo for two weeks in April, so please plan my meetings around the Japan trip."
        assert "Got it" not in a.content and "I'll note" not in a.content

    @pytest.mark.parametrize(
        "assistant",
        [
            "Noted — I'll book aisle seats for your long-haul flights from now on.",
            "Sure! I will remember that.",
            "Understood. Your seat preference is saved. Let me know if anything changes!",
            "Thanks for letting me know.",
        ],
    )
    def test_preference_kept_whatever_the_acknowledgement(self, assistant):
        a = extract_deterministic(
            user_message="Just so you know, I prefer aisle seats on long-haul flights.", assistant_message=assistant
        )
        assert a.content == "I prefer aisle seats on long-haul flights." and a.memory_type == "pattern"

    def test_user_decision(self):
        a = extract_deterministic(
            user_message="We decided to use PostgreSQL for every new service, no more MySQL. Thanks!",
            assistant_message="Understood, I'll use PostgreSQL for new services from now on.",
        )
        assert a.content == "We decided to use PostgreSQL for every new service, no more MySQL."
        assert a.memory_type == "decision" and not a.correction

    @pytest.mark.parametrize(
        "user, assistant",
        [
            ("thanks!", "You're welcome! Let me know if there's anything else I can help with."),
            ("ok", "Great, have a nice day!"),
            ("that worked, thanks", "Glad it helped!"),
            ("hi there", "Hello! Happy to help. Is there anything else you need?"),
        ],
    )
    def test_chatter_stores_nothing(self, user, assistant):
        assert extract_deterministic(user_message=user, assistant_message=assistant) is None

    def test_correction_drops_the_lead_in_and_is_flagged(self):
        a = extract_deterministic(
            user_message="Actually, I changed my mind: I prefer window seats on long-haul flights, not aisle.",
            assistant_message="Sure, I'll switch your preference to window seats.",
        )
        assert a.content == "I prefer window seats on long-haul flights, not aisle." and a.correction

    def test_a_real_answer_is_still_the_lesson(self):
        a = extract_deterministic(user_message="How do I list running containers?", assistant_message="Sure! Run `docker ps`.")
        assert a.content == "Q: How do I list running containers?\nA: Run `docker ps`." and a.memory_type == "faq"


@pytest.mark.django_db
class TestObserveConversations:
    def test_the_stored_memory_is_the_users_preference(self, api):
        r = observe(
            api,
            "I'm flying to Tokyo for two weeks in April, so please plan my meetings around the Japan trip.",
            "Got it, I'll note your April travel to Japan.",
        )
        assert r["decision"] == "saved"
        assert Memory.objects.get(pk=r["memory_id"]).content.startswith("I'm flying to Tokyo for two weeks in April")

    def test_assistant_only_chatter_stores_nothing(self, api):
        r = observe(api, "thanks, that's all for today", "You're welcome! Have a great evening.")
        assert r["decision"] == "skipped" and r["evidence"]["rule"] == "nothing_reusable" and r["memory_id"] is None
        assert not Memory.objects.exists() and not MemoryWriteDecision.objects.exists()

    def test_correction_replaces_the_earlier_preference(self, api):
        old = observe(api, "I prefer aisle seats on long-haul flights.", "Noted, I'll book aisle seats for you.")
        new = observe(
            api, "Actually, I prefer window seats on long-haul flights, not aisle.", "Got it, I'll switch to window seats."
        )
        assert new["decision"] == "new_version" and new["evidence"]["rule"] == "contradiction", new
        row, old_row = Memory.objects.get(pk=new["memory_id"]), Memory.objects.get(pk=old["memory_id"])
        assert row.content == "I prefer window seats on long-haul flights, not aisle." and row.supersedes_id == old_row.pk
        assert old_row.status == "deprecated"

    def test_correction_of_a_preference_the_assistant_just_used(self, api):
        old = observe(api, "I prefer aisle seats on long-haul flights.", "Noted, I'll book aisle seats for you.")
        used = retrieve(api, "which seat should I book on the long-haul flight")
        assert [i["id"] for i in used["items"]] == [old["memory_id"]]
        new = observe(
            api, "I changed my mind: I prefer window seats on long-haul flights, not aisle.", "Sure, I'll switch to window."
        )
        assert new["decision"] == "new_version" and new["evidence"]["deprecated_memory_id"] == old["memory_id"]
        signal = new["evidence"]["outcome_signal"]
        assert signal["outcome"] == "failure" and signal["retrieval_id"] == used["retrieval_id"]
        assert signal["memory_ids"] == []  # already superseded by this turn: its reason stays
        old_row = Memory.objects.get(pk=old["memory_id"])
        assert old_row.status == "deprecated" and old_row.status_reason.startswith("superseded by memory")
        assert retrieve(api, "which seat should I book on the long-haul flight")["items"][0]["id"] == new["memory_id"]


# --- outcome signals ----------------------------------------------------------------------------


class TestOutcomeDetect:
    @pytest.mark.parametrize("text", ["that worked", "Perfect, thanks!", "Yes, that fixed it.", "ok it works now"])
    def test_success(self, text):
        assert outcome_detect(text).outcome == "success"

    @pytest.mark.parametrize(
        "text",
        ["that didn't work", "That's wrong, the port is 5433.", "I changed my mind.", "not anymore", "It still doesn't work"],
    )
    def test_failure(self, text):
        assert outcome_detect(text).outcome == "failure"

    @pytest.mark.parametrize(
        "text", ["How do I rotate logs?", "I prefer Vim because it works everywhere", "a perfect copy please"]
    )
    def test_neutral(self, text):
        assert outcome_detect(text) is None

    def test_validation_passed_wins(self):
        assert outcome_detect("that didn't work", validation_passed=True).outcome == "success"
        assert outcome_detect("that worked", validation_passed=False).outcome == "failure"


@pytest.mark.django_db
class TestOutcomeSignals:
    def _used(self, api):
        """Two memories of alice, retrieved for a question: the lessons the assistant used."""
        rows = seed_memories(
            texts=["Rotate the application logs with logrotate every night and keep fourteen compressed copies."]
        )
        other = make_memory(content="Bob's lesson about logrotate schedules and compressed copies.", user="bob")
        r = retrieve(api, "how do I rotate the application logs")
        used = [i["id"] for i in r["items"]]
        assert used == [rows[0].pk]
        return rows[0], other, r["retrieval_id"]

    def test_that_worked_promotes_the_memories_used(self, api):
        memory, other, retrieval_id = self._used(api)
        r = observe(api, "That worked, thanks!", "Glad it helped!")
        assert r["decision"] == "skipped" and r["evidence"]["rule"] == "nothing_reusable"
        signal = r["evidence"]["outcome_signal"]
        assert signal["outcome"] == "success" and signal["retrieval_id"] == retrieval_id and signal["memory_ids"] == [memory.pk]
        memory.refresh_from_db()
        assert memory.status == "verified" and memory.confidence >= 0.9 and memory.status_changed_by == "feedback"
        assert "that worked" in memory.status_reason
        other.refresh_from_db()
        assert other.status == "candidate"  # another user's memory is never touched

    def test_validation_passed_meta_promotes(self, api):
        memory, _, _ = self._used(api)
        r = observe(api, "Ran the nightly job again.", "Good to know.", validation_passed=True)
        assert r["evidence"]["outcome_signal"]["outcome"] == "success"
        memory.refresh_from_db()
        assert memory.status == "verified"

    @pytest.mark.parametrize("text", ["That didn't work, the disk still fills up.", "I changed my mind.", "That's wrong."])
    def test_failure_deprecates_the_memories_used(self, api, text):
        memory, _, _ = self._used(api)
        r = observe(api, text, "Sorry about that!")
        assert r["evidence"]["outcome_signal"]["outcome"] == "failure"
        memory.refresh_from_db()
        assert memory.status == "deprecated" and memory.streak == 0 and memory.deprecated_at is not None
        assert retrieve(api, "how do I rotate the application logs")["items"] == []  # never retrieved again

    def test_the_retrieval_for_the_signal_itself_is_not_the_one_judged(self, api):
        memory, _, retrieval_id = self._used(api)
        retrieve(api, "That worked, thanks!")  # the agent retrieved for the new turn before answering it
        r = observe(api, "That worked, thanks!", "Glad it helped!")
        assert r["evidence"]["outcome_signal"]["retrieval_id"] == retrieval_id

    def test_explicit_retrieval_id_of_another_user_is_404(self, api):
        _, _, retrieval_id = self._used(api)
        body = {
            "user_id": "bob",
            "user_message": "that worked",
            "assistant_message": "Great!",
            "meta": {"retrieval_id": retrieval_id},
        }
        r = api.post(OBSERVE, body, format="json")
        assert r.status_code == 404 and "meta.retrieval_id" in r.json()["fields"]

    def test_neutral_turn_changes_nothing(self, api):
        memory, _, _ = self._used(api)
        before = Memory.objects.values_list("pk", "status", "confidence", "streak").order_by("pk")
        before = list(before)
        r = observe(api, "How often does logrotate run on the staging servers?", "Every night at 03:00 through cron.daily.")
        assert "outcome_signal" not in r["evidence"]
        after = (
            Memory.objects.filter(pk__in=[p for p, *_ in before])
            .values_list("pk", "status", "confidence", "streak")
            .order_by("pk")
        )
        assert list(after) == before

    def test_signal_without_a_recent_retrieval_changes_nothing(self, api):
        memory = make_memory()
        r = observe(api, "that worked", "Great!")
        assert r["evidence"]["outcome_signal"] == {
            "outcome": "success",
            "cue": "that worked",
            "retrieval_id": None,
            "memory_ids": [],
        }
        memory.refresh_from_db()
        assert memory.status == "candidate"


# --- stored skip and merge decisions ------------------------------------------------------------


@pytest.mark.django_db
class TestWriteDecisions:
    Q = "How do I rotate the application logs on the staging servers?"
    A = "Run logrotate with the config in /etc/logrotate.d/app and restart the app service afterwards so it reopens its files."

    def test_skip_is_stored_with_evidence(self, api):
        first = observe(api, self.Q, self.A)
        second = observe(api, self.Q, self.A)
        assert second["decision"] == "skipped"
        d = MemoryWriteDecision.objects.get()
        assert d.memory_id == first["memory_id"] and d.kind == "skip" and d.rule == "exact"
        assert d.incoming_text == Memory.objects.get().content and len(d.incoming_simhash) == 16
        assert d.thresholds["simhash_max_distance"] == 3 and d.thresholds["semantic_checked"] is True

    def test_merge_is_stored_and_the_history_kept(self, api):
        base = "Use the staging bastion host to reach the internal database, and keep the tunnel open while the migration scripts run against the replica in the eu region."
        first = observe(api, "remember this please", base, type="pattern")
        changed = base.replace("internal database", "internal postgres database")
        second = observe(api, "remember this please", changed, type="pattern")
        assert second["decision"] == "merged"
        d = MemoryWriteDecision.objects.get()
        assert d.kind == "merge" and d.rule == "simhash" and d.hamming <= 3 and d.text_changed
        assert d.incoming_text == changed and d.memory_id == first["memory_id"]
        m = Memory.objects.get()
        assert [h.content for h in m.history.order_by("history_date")] == [base, changed]

    def test_saved_and_new_version_store_no_decision(self, api):
        observe(api, self.Q, self.A)
        assert not MemoryWriteDecision.objects.exists()

    def test_admin_change_page_shows_them_read_only(self, api, admin_client):
        first = observe(api, self.Q, self.A)
        observe(api, self.Q, self.A)
        page = admin_client.get(reverse("admin:memories_memory_change", args=[first["memory_id"]]))
        assert page.status_code == 200
        html = page.content.decode()
        assert "Skip/merge decisions" in html and "SimHash distance 0 (≤ 3)" in html and "exact" in html
        assert 'name="write_decisions-0-rule"' not in html  # read only: no form inputs


# --- X-Embedding-Pending --------------------------------------------------------------------------


@pytest.mark.django_db
class TestEmbeddingPendingHeader:
    TURN = ("How do I rotate the application logs on the staging servers?", "Run logrotate nightly with the app config.")

    def _observe(self, api):
        body = {"user_id": "alice", "user_message": self.TURN[0], "assistant_message": self.TURN[1]}
        return api.post(OBSERVE, body, format="json")

    def test_embedded_memory_has_no_header(self, api):
        r = self._observe(api)
        assert r.json()["decision"] == "saved" and "X-Embedding-Pending" not in r
        assert Memory.objects.get().embedding is not None

    def test_memory_stored_without_a_vector_sets_the_header_not_a_body_flag(self, api, failing_embedder):
        r = self._observe(api)
        assert r.status_code == 200 and r["X-Embedding-Pending"] == "1"
        body = r.json()
        assert body["decision"] == "saved" and set(body) == {"decision", "memory_id", "evidence"}
        assert "embedding_pending" not in body["evidence"]
        assert Memory.objects.get(pk=body["memory_id"]).embedding is None

    def test_header_comes_from_the_stored_row(self, api, monkeypatch):
        # The query vector is computed, but the embedding task does nothing: the row has no vector yet.
        monkeypatch.setattr(memories.tasks, "memories_embed", lambda **kw: 0)
        r = self._observe(api)
        assert r.json()["decision"] == "saved" and r["X-Embedding-Pending"] == "1"
        again = self._observe(api)
        assert again.json()["decision"] == "skipped" and "X-Embedding-Pending" not in again  # nothing stored

    def test_the_header_is_in_the_schema(self, tmp_path):
        target = tmp_path / "schema.yaml"
        call_command("spectacular", "--file", str(target))
        schema = yaml.safe_load(target.read_text())
        headers = schema["paths"]["/api/v1/memories/observe"]["post"]["responses"]["200"]["headers"]
        assert "X-Embedding-Pending" in headers
        props = schema["components"]["schemas"]["ObserveResponse"]["properties"]
        assert not any("pending" in name for name in props)
