"""Memories: commands, admin screens, quarantine release/discard, purge, extractor, isolation, concurrency."""

import datetime
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone
from pgvector.django import CosineDistance

from common.api import ApplicationError, Conflict
from memories.extraction import derive_topic, detect_type, extract, extract_deterministic
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval
from memories.services import (
    memories_embed,
    memory_observe,
    memory_promote,
    memory_retrieve,
    quarantine_discard,
    quarantine_release,
)
from tenants.context import tenant_scope
from tenants.services import tenant_create
from tests.conftest import LOG_LESSONS, OBSERVE, OUTCOME, RETRIEVE, SEARCH, make_memory, seed_memories


def run(*args):
    stdout, err = StringIO(), StringIO()
    call_command(*args, stdout=stdout, stderr=err)
    return stdout.getvalue(), err.getvalue()


# --- extractor -------------------------------------------------------------------------


class TestDeterministicExtractor:
    @pytest.mark.parametrize(
        "user, answer, expected",
        [
            ("How do I list the running containers?", "Run `docker ps` to list them.", "faq"),
            ("show me", "```bash\ndocker ps -a\n```", "snippet"),
            ("How do I deploy?", "1. Build the image\n2. Push it\n3. Roll out the deployment", "procedure"),
            ("note this", "We decided to use PostgreSQL for every new service.", "decision"),
            ("remember", "Always squash commits before merging to main.", "pattern"),
        ],
    )
    def test_types(self, user, answer, expected):
        assert detect_type(user, answer) == expected

    def test_faq_content_and_topic_are_deterministic(self):
        a = extract_deterministic(
            user_message="How do I rotate logs? Thanks", assistant_message="Use logrotate with the app config."
        )
        b = extract_deterministic(
            user_message="How do I rotate logs? Thanks", assistant_message="Use logrotate with the app config."
        )
        assert a == b and a.memory_type == "faq"
        assert a.content == "Q: How do I rotate logs?\nA: Use logrotate with the app config."
        assert a.topic == derive_topic(a.content) and "logrotate" in a.topic

    def test_acknowledgement_keeps_the_users_statement(self):
        a = extract_deterministic(
            user_message="From now on, write every report date in ISO 8601 format.",
            assistant_message="Got it, I'll remember that.",
        )
        assert a.content == "From now on, write every report date in ISO 8601 format." and a.memory_type == "decision"

    def test_hints_win_and_long_text_is_cut(self):
        a = extract_deterministic(
            user_message="x", assistant_message="word. " * 1000, hints={"type": "pattern", "topic": "T", "tags": ["a"]}
        )
        assert a.memory_type == "pattern" and a.topic == "T" and a.tags == ["a"] and len(a.content) <= 1200


class FakeChatServer(BaseHTTPRequestHandler):
    answer = {}

    def do_POST(self):  # noqa: N802
        length = int(self.headers["Content-Length"])
        FakeChatServer.last_request = json.loads(self.rfile.read(length))
        body = {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": json.dumps(FakeChatServer.answer)},
                }
            ],
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    server = HTTPServer(("127.0.0.1", 0), FakeChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


class TestLlmExtractor:
    def test_used_only_when_configured(self, chat_server):
        FakeChatServer.answer = {
            "type": "pattern",
            "topic": "git merges",
            "tags": ["git"],
            "content": "Squash commits before merging into main.",
        }
        _, used = extract(user_message="q", assistant_message="a")
        assert used == "deterministic"
        with override_settings(MEMORY_EXTRACTOR="llm", MEMORY_LLM_MODEL="fake", MEMORY_LLM_BASE_URL=chat_server):
            artifact, used = extract(user_message="how should we merge?", assistant_message="squash first")
        assert used == "llm" and artifact.content == "Squash commits before merging into main." and artifact.tags == ["git"]
        assert FakeChatServer.last_request["model"] == "fake"

    def test_bad_answer_falls_back(self, chat_server):
        FakeChatServer.answer = {"type": "poem", "content": "x"}
        with override_settings(MEMORY_EXTRACTOR="llm", MEMORY_LLM_MODEL="fake", MEMORY_LLM_BASE_URL=chat_server):
            artifact, used = extract(user_message="How do I list containers?", assistant_message="Run docker ps.")
        assert used.startswith("deterministic (llm failed") and artifact.memory_type == "faq"

    def test_a_turn_holding_a_secret_is_never_sent_to_the_model(self, chat_server):
        FakeChatServer.answer = {"type": "pattern", "content": "Deploy with the token in the header."}
        FakeChatServer.last_request = None
        settings = {"MEMORY_EXTRACTOR": "llm", "MEMORY_LLM_MODEL": "fake", "MEMORY_LLM_BASE_URL": chat_server}
        with override_settings(**settings):
            _, used = extract(
                user_message="How do I deploy?", assistant_message="Use token ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R."
            )
            assert used == "deterministic (the turn holds a secret: not sent to the model)"
            _, used = extract(user_message="What is the wifi password?", assistant_message="Hunter2Staging9")
            assert used.startswith("deterministic (the turn holds")
            assert FakeChatServer.last_request is None
            _, used = extract(user_message="How do I deploy?", assistant_message="Run make deploy from main.")
        assert used == "llm" and FakeChatServer.last_request is not None

    def test_a_failure_quoting_a_secret_is_logged_without_it(self, chat_server, caplog):
        FakeChatServer.answer = {"type": "my api key is ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", "content": "x"}
        with (
            override_settings(MEMORY_EXTRACTOR="llm", MEMORY_LLM_MODEL="fake", MEMORY_LLM_BASE_URL=chat_server),
            caplog.at_level("WARNING", logger="memories.extraction"),
        ):
            _, used = extract(user_message="How do I list containers?", assistant_message="Run docker ps.")
        assert used.startswith("deterministic (llm failed") and "unknown type" in caplog.text
        assert "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R" not in caplog.text and "REDACTED" in caplog.text

    @pytest.mark.django_db
    def test_skip_answer_saves_nothing(self, chat_server):
        FakeChatServer.answer = {"skip": True}
        with override_settings(MEMORY_EXTRACTOR="llm", MEMORY_LLM_MODEL="fake", MEMORY_LLM_BASE_URL=chat_server):
            r = memory_observe(user_id="alice", user_message="hi", assistant_message="hello there, how can I help?")
        assert r.decision == "skipped" and r.memory_id is None and r.evidence["rule"] == "nothing_reusable"
        assert not Memory.objects.exists()


# --- quarantine and purge ------------------------------------------------------------------


@pytest.mark.django_db
class TestQuarantine:
    def blocked(self):
        r = memory_observe(
            user_id="alice",
            user_message="How do I reach the report database?",
            assistant_message="Connect with postgres://report:S3cretPass!@db.internal:5432/reports from the BI host.",
        )
        assert r.decision == "blocked"
        return MemoryQuarantine.objects.get(pk=r.evidence["quarantine_id"])

    def test_release_needs_the_markers_edited_out_then_saves_a_candidate(self):
        item = self.blocked()
        assert "S3cretPass" not in item.redacted_preview
        with pytest.raises(ApplicationError):
            quarantine_release(item=item, actor="admin:rev")
        edited = "Q: How do I reach the report database?\nA: Connect with postgres from the BI host, credentials from the vault."
        result = quarantine_release(item=item, actor="admin:rev", content=edited)
        assert result.decision == "saved"
        item.refresh_from_db()
        assert item.status == "released" and item.released_memory_id == result.memory_id and item.reviewed_by == "admin:rev"
        m = Memory.objects.get(pk=result.memory_id)
        assert m.user_id == "alice" and m.status == "candidate" and m.content == edited
        with pytest.raises(ApplicationError):
            quarantine_release(item=item, actor="admin:rev", content=edited)

    def test_release_refuses_text_that_still_has_a_secret(self):
        item = self.blocked()
        with pytest.raises(ApplicationError) as exc:
            quarantine_release(
                item=item, actor="admin:rev", content="Connect with password=Hunter22Hunter from the BI host every day."
            )
        assert exc.value.field == "redacted_preview"
        assert not Memory.objects.exists()

    def test_discard(self):
        item = self.blocked()
        quarantine_discard(item=item, actor="admin:rev")
        item.refresh_from_db()
        assert item.status == "discarded"
        with pytest.raises(ApplicationError):
            quarantine_discard(item=item, actor="admin:rev")


@pytest.mark.django_db
class TestCommands:
    def test_purge_deprecated_older_than(self):
        old = make_memory(content="Old deprecated lesson about the legacy build server setup.", status="deprecated")
        young = make_memory(content="Recently deprecated lesson about the build cache settings.", status="deprecated")
        live = make_memory(content="A live lesson that is old but must never be purged by age.", status="verified")
        Memory.objects.filter(pk=old.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=120))
        Memory.objects.filter(pk=young.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=10))
        Memory.objects.filter(pk=live.pk).update(updated_at=timezone.now() - datetime.timedelta(days=400))
        stdout, _ = run("purge_deprecated_memories", "--older-than", "90d", "--dry-run")
        assert "would delete 1 deprecated" in stdout and Memory.objects.count() == 3
        stdout, _ = run("purge_deprecated_memories", "--older-than", "90d")
        assert "deleted 1 deprecated" in stdout
        assert set(Memory.objects.values_list("pk", flat=True)) == {young.pk, live.pk}
        with pytest.raises(CommandError):
            run("purge_deprecated_memories", "--older-than", "ninety days")
        with pytest.raises(CommandError):
            run("purge_deprecated_memories", "--older-than", "\u0663\u0660\u0660d")

    def test_periodic_purge_task(self):
        from memories.tasks import memory_purge_deprecated_task

        old = make_memory(content="Old deprecated lesson about the legacy build server setup.", status="deprecated")
        Memory.objects.filter(pk=old.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=91))
        MemoryRetrieval.objects.create(user_id="alice", query_sha256="0" * 64, memory_ids=[])
        MemoryRetrieval.objects.update(created_at=timezone.now() - datetime.timedelta(days=91))
        assert memory_purge_deprecated_task.delay().get() == {"memories": 1, "retrievals": 1}
        assert not Memory.objects.exists() and not MemoryRetrieval.objects.exists()

    def test_embed_memories(self):
        rows = [make_memory(content=t) for t in LOG_LESSONS[:3]]
        stdout, _ = run("embed_memories", "--no-progress", "--batch-size", "2")
        assert "embedded: 3, failed: 0" in stdout
        assert all(Memory.objects.get(pk=r.pk).embedding is not None for r in rows)
        stdout, _ = run("embed_memories", "--no-progress")
        assert "embedded: 0, failed: 0" in stdout

    def test_search_memories_both_semantic_substring(self):
        seed_memories()
        stdout, _ = run("search_memories", "logrotate", "--user", "alice")
        assert "both" in stdout and "logrotate" in stdout
        first = stdout.splitlines()[1]
        assert "logrotate" in first  # literal matches rank first
        stdout, _ = run("search_memories", "how are logs shipped to a central server", "--semantic", "--user", "alice")
        assert "semantic" in stdout and "rsyslog" in stdout.splitlines()[1]
        stdout, _ = run("search_memories", "rsyslog", "--substring")
        assert "substring" in stdout and "alice" in stdout and len(stdout.splitlines()) == 2

    def test_search_memories_in_one_tenant(self):
        acme = tenant_create(slug="acme")
        make_memory(content="Use logrotate for every application log file on the default servers.")
        with tenant_scope([acme.pk]):
            make_memory(content="Use logrotate for every application log file on the acme servers.")
        stdout, _ = run("search_memories", "logrotate", "--substring", "--user", "alice")
        assert "default servers" in stdout and "acme servers" in stdout  # without --tenant: every tenant's alice
        stdout, _ = run("search_memories", "logrotate", "--substring", "--user", "alice", "--tenant", "acme")
        assert "acme servers" in stdout and "default servers" not in stdout
        with pytest.raises(CommandError, match="No tenant 'nope'"):
            run("search_memories", "logrotate", "--tenant", "nope")

    def test_search_memories_without_model_warns_and_uses_substring(self, failing_embedder):
        make_memory(content="Use logrotate for every application log file on the servers.")
        stdout, err = run("search_memories", "logrotate", "--user", "alice")
        assert "substring search only" in err and "logrotate" in stdout
        with pytest.raises(CommandError):
            run("search_memories", "logrotate", "--semantic")

    def test_backfill_embeddings_covers_memories(self):
        from embeddings.selectors import embedded_models

        assert Memory in embedded_models()


# --- admin -----------------------------------------------------------------------------------


@pytest.mark.django_db
class TestAdmin:
    @pytest.fixture
    def admin_client(self, client):
        user = get_user_model().objects.create_superuser("rev", "rev@example.com", "pw-for-tests-only")
        client.force_login(user)
        return client

    def test_lists_filters_and_version_chain(self, admin_client, api):
        old = api.post(
            OBSERVE,
            {
                "user_id": "alice",
                "user_message": "n",
                "assistant_message": "The payments API request timeout should be set to 30 seconds for batch jobs.",
                "meta": {"type": "pattern", "topic": "payments"},
            },
            format="json",
        ).json()
        new = api.post(
            OBSERVE,
            {
                "user_id": "alice",
                "user_message": "n",
                "assistant_message": "The payments API request timeout should be set to 90 seconds for batch jobs.",
                "meta": {"type": "pattern", "topic": "payments"},
            },
            format="json",
        ).json()
        assert new["decision"] == "new_version"
        for url in [
            "/admin/memories/memory/",
            "/admin/memories/memory/?status=deprecated",
            "/admin/memories/memory/?user_id=alice&memory_type=pattern&topic=payments",
            "/admin/memories/memoryquarantine/",
            "/admin/memories/memoryretrieval/",
        ]:
            assert admin_client.get(url).status_code == 200, url
        page = admin_client.get(f"/admin/memories/memory/{new['memory_id']}/change/").content.decode()
        assert f"#{old['memory_id']} v1" in page and f"#{new['memory_id']} v2" in page
        listing = admin_client.get("/admin/memories/memory/?user_id=bob").content.decode()
        assert "payments API" not in listing

    def test_promote_deprecate_purge_actions(self, admin_client, django_capture_on_commit_callbacks):
        m = make_memory(content=LOG_LESSONS[0])
        url = "/admin/memories/memory/"
        asked = admin_client.post(url, {"action": "promote", "_selected_action": [m.pk]})
        assert 'class="change"' in asked.content.decode()  # a confirmation listing the memory first
        m.refresh_from_db()
        assert m.status == "candidate"
        admin_client.post(url, {"action": "promote", "_selected_action": [m.pk], "post": "yes", "reason": "proven"})
        m.refresh_from_db()
        assert m.status == "verified" and m.status_changed_by == "admin:rev"
        admin_client.post(url, {"action": "deprecate", "_selected_action": [m.pk], "reason": ""})
        m.refresh_from_db()
        assert m.status == "verified"  # no reason, no change
        admin_client.post(url, {"action": "deprecate", "_selected_action": [m.pk], "reason": "wrong advice"})
        m.refresh_from_db()
        assert m.status == "deprecated" and m.status_reason == "wrong advice"
        for days in ("0", "-1", "abc", "36501", "\N{SUPERSCRIPT TWO}"):  # the action form or the action refuses
            with django_capture_on_commit_callbacks(execute=True) as sent:
                admin_client.post(url, {"action": "purge_deprecated", "_selected_action": [m.pk], "days": days})
            assert sent == []
        assert Memory.objects.filter(pk=m.pk).exists()  # at least 1 day
        Memory.objects.filter(pk=m.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=2))
        with django_capture_on_commit_callbacks(execute=False) as sent:
            admin_client.post(url, {"action": "purge_deprecated", "_selected_action": [m.pk], "days": "1"})
        assert Memory.objects.filter(pk=m.pk).exists() and len(sent) == 1  # sent once the request commits
        with django_capture_on_commit_callbacks(execute=True):
            done = admin_client.post(url, {"action": "purge_deprecated", "_selected_action": [m.pk], "days": "1"}, follow=True)
        assert "runs in batches as this page is saved" in done.content.decode()
        assert not Memory.objects.filter(pk=m.pk).exists()

    def test_a_deprecated_memory_taught_again_is_not_promoted_beside_its_live_copy(self, admin_client):
        old = make_memory(content=LOG_LESSONS[0], status="deprecated")
        live = make_memory(content=LOG_LESSONS[0])  # the user taught the same text again after the deprecation
        done = admin_client.post(
            "/admin/memories/memory/",
            {"action": "promote", "_selected_action": [old.pk], "post": "yes", "reason": "still true"},
            follow=True,
        )
        assert done.status_code == 200
        assert "promote that one" in done.content.decode() and f"memory {live.pk}" in done.content.decode()
        old.refresh_from_db()
        live.refresh_from_db()
        assert (old.status, live.status) == ("deprecated", "candidate")
        with pytest.raises(Conflict) as refused:
            memory_promote(memory=old, actor="admin:rev")
        assert refused.value.extra == {"live_copy": live.pk}
        memory_promote(memory=live, actor="admin:rev")  # the live copy is the one to promote
        live.refresh_from_db()
        assert live.status == "verified"

    def test_quarantine_edit_then_release(self, admin_client):
        r = memory_observe(
            user_id="alice",
            user_message="How do I log in to grafana?",
            assistant_message="Use the admin account with password: CorrectHorse9 on the staging console.",
        )
        item = MemoryQuarantine.objects.get(pk=r.evidence["quarantine_id"])
        page = admin_client.get(f"/admin/memories/memoryquarantine/{item.pk}/change/").content.decode()
        assert "CorrectHorse9" not in page and "[REDACTED:" in page
        item.redacted_preview = "Use the admin account on the staging grafana console; the credentials are in the team vault."
        item.save(update_fields=["redacted_preview"])
        selected = {"action": "release", "_selected_action": [item.pk]}
        asked = admin_client.post("/admin/memories/memoryquarantine/", selected)
        assert "stored as a memory of alice" in asked.content.decode()
        item.refresh_from_db()
        assert item.status == "pending"
        admin_client.post("/admin/memories/memoryquarantine/", {**selected, "post": "yes"})
        item.refresh_from_db()
        assert item.status == "released" and Memory.objects.filter(pk=item.released_memory_id, user_id="alice").exists()


# --- isolation -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_user_b_sees_nothing_of_user_a(api):
    a_rows = seed_memories(user="alice")
    a_ids = {r.pk for r in a_rows}
    # retrieve
    body = api.post(RETRIEVE, {"user_id": "bob", "query": LOG_LESSONS[0]}, format="json").json()
    assert body["items"] == [] and body["block"] == ""
    # search, every mode
    for mode in ("both", "semantic", "substring"):
        r = api.post(
            SEARCH, {"user_id": "bob", "query": "logrotate", "mode": mode, "include_deprecated": True}, format="json"
        ).json()
        assert r["results"] == []
    # feedback on A's ids: 404 and nothing changes; "last" is B's own (none yet)
    for ids in ([a_rows[0].pk], sorted(a_ids)):
        assert api.post(OUTCOME, {"user_id": "bob", "memory_ids": ids, "outcome": "failure"}, format="json").status_code == 404
    assert api.post(OUTCOME, {"user_id": "alice", "memory_ids": "last", "outcome": "failure"}, format="json").status_code == 404
    api.post(RETRIEVE, {"user_id": "alice", "query": LOG_LESSONS[0]}, format="json")
    assert api.post(OUTCOME, {"user_id": "bob", "memory_ids": "last", "outcome": "failure"}, format="json").status_code == 404
    assert not Memory.objects.filter(pk__in=a_ids, status="deprecated").exists()
    # observe: B's identical lesson is B's own, never merged into A's
    r = api.post(
        OBSERVE,
        {"user_id": "bob", "user_message": "note", "assistant_message": LOG_LESSONS[0], "meta": {"type": "pattern"}},
        format="json",
    ).json()
    assert r["decision"] == "saved" and r["memory_id"] not in a_ids
    assert Memory.objects.get(pk=r["memory_id"]).user_id == "bob"
    # B's retrieval now shows only B's memory
    body = api.post(RETRIEVE, {"user_id": "bob", "query": LOG_LESSONS[0]}, format="json").json()
    assert [i["id"] for i in body["items"]] == [r["memory_id"]]
    # commands scoped with --user
    stdout, _ = run("search_memories", "logrotate", "--user", "bob")
    assert not any(str(pk) in stdout.split() for pk in a_ids) and "alice" not in stdout
    stdout, _ = run("search_memories", "application logs", "--user", "carol")
    assert stdout.strip() == "No memories found."
    # hits of A's memories were not touched by B's calls
    assert all(m.hits <= 1 for m in Memory.objects.filter(pk__in=a_ids))


@pytest.mark.django_db(transaction=True)  # committed rows, as in production
def test_many_users_filtered_vector_search_is_never_short():
    """Other users' rows nearer to the query must not starve one user's search (iterative index scans).

    300 BANKING77 card questions of 300 other users are all nearer to a card query than dora's two
    memories (more rows than hnsw.ef_search). With sorting disabled the planner must walk the HNSW
    index; the selector still gets both her memories (iterative scans, and an exact scan of her rows
    when the index answers short), while the bare index scan without iterative scans (the control) gets fewer.
    Her two rows would be scanned exactly from the start (``NEAREST_EXACT_MAX_ROWS``); the limit is off here so
    that the walk is what is tested.
    """
    from learning import datasets
    from learning.resolution import embed_query
    from memories.selectors import memory_semantic_candidates

    if not datasets.available():
        pytest.fail(f"BANKING77 is expected at {datasets.banking77_dir()}")
    train = datasets.by_verb(datasets.load("train"))
    card = sorted(t for verb, texts in train.items() if ".card_" in verb for t in texts)[:300]
    noise = [make_memory(user=f"noise{i}", content=text) for i, text in enumerate(card)]
    memories_embed(memory_ids=[m.pk for m in noise])
    mine = seed_memories(
        user="dora", texts=["What is the minimum age to open an account here?", "Which fiat currencies can I hold and exchange?"]
    )
    query = "My new card still has not arrived, when will it come?"
    vector, model, _ = embed_query(query)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_sort = off")
        cur.execute("SET LOCAL enable_seqscan = off")
        qs = (
            Memory.objects.filter(user_id="dora", status="candidate", embedding_model=model)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")[:6]
        )
        assert "memory_embedding_hnsw" in qs.explain()
        with override_settings(NEAREST_EXACT_MAX_ROWS=0):
            items = memory_semantic_candidates(
                user_id="dora", namespace="learning", vector=vector, model=model, filters=None, k=6, min_score=-1.0
            )
        cur.execute("SET LOCAL hnsw.iterative_scan = off")  # the control: the bare index scan comes back short
        starved = list(qs)
    assert sorted(i.memory.pk for i in items) == sorted(m.pk for m in mine)
    assert len(starved) < len(mine)
    for exact_max in (0, 500):
        with override_settings(MEMORY_RETRIEVE_MIN_SCORE=-1.0, NEAREST_EXACT_MAX_ROWS=exact_max):
            result = memory_retrieve(user_id="dora", query=query)
        assert sorted(i.memory.pk for i in result.items) == sorted(m.pk for m in mine)
    assert all(i.memory.user_id == "dora" for i in result.items)


# --- concurrency -------------------------------------------------------------------------------


def _threads(n, target):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_observes_store_one_memory():
    results = []
    _threads(
        6,
        lambda i: results.append(
            memory_observe(user_id="race", user_message="note", assistant_message=LOG_LESSONS[0], meta={"type": "pattern"})
        ),
    )
    assert Memory.objects.filter(user_id="race").count() == 1
    assert sorted(r.decision for r in results) == ["saved"] + ["skipped"] * 5
    assert len({r.memory_id for r in results}) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_retrievals_count_every_hit():
    (m,) = seed_memories(user="busy", texts=[LOG_LESSONS[0]])
    with override_settings(MEMORY_AUTO_PROMOTE_STREAK=100, MEMORY_AUTO_PROMOTE_HITS=100):
        _threads(8, lambda i: memory_retrieve(user_id="busy", query=LOG_LESSONS[0]))
    m.refresh_from_db()
    assert m.hits == 8 and m.streak == 8
    assert MemoryRetrieval.objects.filter(user_id="busy").count() == 8


@pytest.mark.django_db
def test_a_purged_memory_takes_its_audit_trail_with_it():
    """The purge deletes deprecated memories for good: their text does not live on in their history (a year more,
    by HISTORY_RETENTION_DAYS), and a memory kept keeps its trail."""
    from memories.services import memories_purge_deprecated

    gone = make_memory(content=LOG_LESSONS[0], status="deprecated")
    kept = make_memory(content=LOG_LESSONS[1])
    Memory.objects.filter(pk=gone.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=100))
    trail = Memory.history.model.objects
    assert trail.filter(id=gone.pk).exists() and trail.filter(id=kept.pk).exists()
    assert memories_purge_deprecated(older_than=datetime.timedelta(days=90))["memories"] == 1
    assert not Memory.objects.filter(pk=gone.pk).exists() and not trail.filter(id=gone.pk).exists()
    assert trail.filter(id=kept.pk).exists()
    assert not trail.filter(content=LOG_LESSONS[0]).exists()
