"""Vectors that cannot be used (NaN, infinite, beyond float32, zero norm) are refused by every embedder like a server
that is down; stored zero vectors are re-embedded by the backfill; the backfill never overwrites the vector of a row
whose text changed while its batch was embedded."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from common.text import text_hash
from embeddings.embedders import CachedEmbedder, EmbeddingError, OpenAIEmbedder, get_embedder, set_embedder
from embeddings.selectors import embedding_rows_needing_work
from embeddings.services import embeddings_backfill, embeddings_refresh
from learning.models import LearnedPhrase, VerbPhrase

LOCAL_MODEL = "all-MiniLM-L6-v2-onnx-int8"  # the remote server is named as the local model: the catalogue's vectors compare


class _Server(BaseHTTPRequestHandler):
    """An OpenAI-compatible embeddings endpoint whose answer is spoiled as ``mode`` says."""

    mode = "ok"
    requests = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests += 1
        n, dims, mode = len(body["input"]), body.get("dimensions", 1536), type(self).mode
        rng = np.random.default_rng(type(self).requests)
        vectors = [rng.normal(size=dims).tolist() for _ in range(n)]
        if mode == "zero":
            vectors = [[0.0] * dims for _ in range(n)]
        elif mode == "tiny":
            vectors = [[1e-12] * dims for _ in range(n)]
        elif mode in ("nan", "inf", "huge"):
            vectors[-1][3] = {"nan": float("nan"), "inf": float("inf"), "huge": 1e39}[mode]
        data = [{"object": "embedding", "index": 0 if mode == "dup_index" else i, "embedding": v} for i, v in enumerate(vectors)]
        payload = {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(payload).encode())  # NaN and Infinity as Python's json writes them

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


@pytest.fixture
def server(server_url):
    _Server.mode, _Server.requests = "ok", 0
    yield _Server
    _Server.mode = "ok"


@pytest.fixture
def remote(catalogue, server_url, server, settings):
    """The catalogue embedded by the local model, then the process's embedder switched to the loopback server."""
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_MODEL = LOCAL_MODEL
    settings.OPENAI_BASE_URL = server_url
    settings.OPENAI_API_KEY = "k"
    settings.EMBEDDING_MAX_RETRIES = 0
    settings.EMBEDDING_TIMEOUT_S = 2.0
    settings.RESOLVE_EMBED_TIMEOUT_S = 2.0
    set_embedder(None)
    yield server
    set_embedder(None)


def _remote_embedder(url):
    return CachedEmbedder(
        OpenAIEmbedder(model="m", base_url=url, api_key="k", timeout=2, max_retries=0, batch_size=8), max_size=100
    )


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("nan", "NaN or infinite"),
        ("inf", "NaN or infinite"),
        ("huge", "overflow float32"),
        ("zero", "zero or near-zero norm"),
        ("tiny", "zero or near-zero norm"),
        ("dup_index", "repeated or missing indices"),
    ],
)
def test_remote_server_bad_vectors_raise_an_embedding_error_naming_the_problem_and_are_never_cached(
    server_url, server, mode, problem
):
    embedder = _remote_embedder(server_url)
    server.mode = mode
    with pytest.raises(EmbeddingError, match=problem):
        embedder.embed_batch(["alpha", "beta"])
    assert embedder._cache == {}
    server.mode = "ok"  # the same texts are asked again once the server answers well
    vectors = embedder.embed_batch(["alpha", "beta"])
    assert server.requests == 2
    assert all(np.isfinite(v).all() and abs(float(np.linalg.norm(v)) - 1) < 1e-5 for v in vectors)
    assert len(embedder._cache) == 2
    assert embedder.embed_batch(["beta"])[0].tolist() == vectors[1].tolist()
    assert server.requests == 2  # answered from the cache


def test_the_cache_keeps_no_text_of_what_it_embedded():
    """An erased user's words must not stay readable in the memory of the processes that embedded them."""
    from embeddings.embedders import CachedEmbedder

    class Inner:
        model_name = "inner"
        dimension = 384
        calls = 0

        def embed_batch(self, texts):
            Inner.calls += 1
            return [np.eye(384, dtype=np.float32)[i] for i, _ in enumerate(texts)]

    cached = CachedEmbedder(Inner(), max_size=10)
    secret = "my account number is 12345678 and my name is Ada"
    first = cached.embed_batch([secret, "hello"])
    again = cached.embed_batch([secret])
    assert Inner.calls == 1 and again[0].tolist() == first[0].tolist()
    assert all(isinstance(k, bytes) and secret.encode() not in k for k in cached._cache)
    assert secret not in repr(cached.__dict__)


class _Spoiled:
    """Any backend (a future one, a parallel pool, a test double) answering one unusable vector among good ones."""

    model_name, dimension = "spoiled", 384

    def __init__(self, spoil):
        self.spoil, self.calls = spoil, 0

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        self.calls += 1
        vectors = [np.full(384, 0.05, dtype=np.float32) for _ in texts]
        return self.spoil(vectors)


def _with(value):
    def spoil(vectors):
        vectors[-1] = vectors[-1].astype(np.float64)
        vectors[-1][7] = value
        return vectors

    return spoil


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (_with(np.nan), "NaN or infinite"),
        (_with(-np.inf), "NaN or infinite"),
        (_with(1e39), "overflow float32"),
        (lambda vs: [*vs[:-1], np.zeros(384, dtype=np.float32)], "zero or near-zero norm"),
        (lambda vs: vs[:-1], "shape"),
        (lambda vs: [*vs[:-1], np.ones(100, dtype=np.float32)], "not vectors of numbers|shape"),
    ],
)
def test_the_cache_checks_every_backends_vectors_before_use_and_caches_none_of_a_bad_batch(spoil, problem):
    inner = _Spoiled(spoil)
    cached = CachedEmbedder(inner, max_size=100)
    with pytest.raises(EmbeddingError, match=problem):
        cached.embed_batch(["one", "two", "three"])
    assert cached._cache == {}
    with pytest.raises(EmbeddingError):
        cached.embed("one")  # asked again, not answered from a cache
    assert inner.calls == 2


def test_the_local_model_refuses_a_zero_or_non_finite_pooled_vector(monkeypatch):
    local = get_embedder().inner

    class Session:
        def __init__(self, value):
            self.value = value

        def run(self, _outputs, feeds):
            ids = feeds["input_ids"]
            return [np.full((*ids.shape, 384), self.value, dtype=np.float32)]

    monkeypatch.setattr(local, "_session", Session(0.0))
    with pytest.raises(EmbeddingError, match="local model answered 1 vector.*zero or near-zero norm"):
        local.embed("hello there")
    monkeypatch.setattr(local, "_session", Session(np.nan))
    with pytest.raises(EmbeddingError, match="NaN or infinite"):
        local.embed_batch(["hello", "there"])


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["nan", "inf", "huge", "zero"])
def test_resolve_answers_degraded_from_the_text_tiers_when_the_server_answers_a_bad_vector(api, remote, mode):
    remote.mode = mode
    api.raise_request_exception = False
    r = api.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json")
    assert r.status_code == 200, r.content[:300]
    assert r.json()["verb"] == "cbu.list"
    assert r.json()["degraded"] is True


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["nan", "zero"])
def test_a_confirmed_phrase_is_stored_without_a_vector_then_the_backfill_embeds_it(gov_api, remote, mode):
    remote.mode = mode
    gov_api.raise_request_exception = False
    r = gov_api.post(
        "/api/v1/resolutions/confirm", {"text": "show me every cbu", "verb": "cbu.list", "user_id": "u1"}, format="json"
    )
    assert r.status_code == 200, r.content[:300]
    row = LearnedPhrase.objects.get(normalized="show me every cbu", user_id="u1")
    assert row.embedding is None and row.embedding_hash == ""

    remote.mode = "ok"
    assert embeddings_backfill()["failed"] == 0
    row.refresh_from_db()
    assert abs(float(np.linalg.norm(row.embedding)) - 1) < 1e-5
    assert row.embedding_model == LOCAL_MODEL and row.embedding_hash == text_hash(row.normalized)


@pytest.mark.django_db
def test_a_stored_zero_vector_with_a_current_model_and_hash_needs_work_and_the_backfill_replaces_it(catalogue):
    set_embedder(None)
    model = get_embedder().model_name
    zeroed, healthy = VerbPhrase.objects.order_by("pk")[:2]
    VerbPhrase.objects.filter(pk=zeroed.pk).update(embedding=[0.0] * 384)
    assert zeroed.embedding_model == model and zeroed.embedding_hash == text_hash(zeroed.normalized)

    needing = list(embedding_rows_needing_work(VerbPhrase, current_model=model).values_list("pk", flat=True))
    assert needing == [zeroed.pk]

    totals = embeddings_backfill()
    assert totals["embedded"] == 1 and totals["failed"] == 0
    zeroed.refresh_from_db()
    assert np.allclose(zeroed.embedding, get_embedder().embed(zeroed.normalized), atol=1e-5)
    assert not embedding_rows_needing_work(VerbPhrase, current_model=model).exists()
    assert healthy.pk not in needing


class _WriterInTheMiddle:
    """The local model; while the first batch is embedded, another writer changes one row's text and stores the new
    text's vector."""

    def __init__(self, inner, target_pk, new_text):
        self.inner, self.target_pk, self.new_text, self.done = inner, target_pk, new_text, False
        self.model_name, self.dimension, self.in_process = inner.model_name, inner.dimension, True

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        out = self.inner.embed_batch(texts)
        if not self.done:
            self.done = True
            VerbPhrase.objects.filter(pk=self.target_pk).update(
                normalized=self.new_text,
                text=self.new_text,
                embedding=self.inner.embed(self.new_text),
                embedding_model=self.model_name,
                embedding_hash=text_hash(self.new_text),
            )
        return out


@pytest.mark.django_db
def test_the_backfill_keeps_the_vector_a_concurrent_writer_stored_for_new_text(catalogue):
    set_embedder(None)
    local = get_embedder().inner
    target = VerbPhrase.objects.order_by("pk").first()
    others = VerbPhrase.objects.exclude(pk=target.pk).count()
    VerbPhrase.objects.update(embedding=None, embedding_model="", embedding_hash="")  # e.g. after a change of model
    new_text = "wire money to a supplier"
    set_embedder(_WriterInTheMiddle(local, target.pk, new_text))
    try:
        totals = embeddings_backfill()
    finally:
        set_embedder(None)

    assert totals["failed"] == 0 and totals["embedded"] == others  # the changed row is neither written nor a failure
    row = VerbPhrase.objects.get(pk=target.pk)
    assert row.normalized == new_text and row.embedding_hash == text_hash(new_text)
    assert float(np.dot(np.asarray(row.embedding), local.embed(new_text))) > 0.999
    for phrase in VerbPhrase.objects.exclude(pk=target.pk):
        assert phrase.embedding_hash == text_hash(phrase.normalized)
        assert np.allclose(phrase.embedding, local.embed(phrase.normalized), atol=1e-5)


@pytest.mark.django_db
def test_refresh_writes_the_rows_whose_text_is_unchanged_and_skips_a_row_whose_text_changed(catalogue):
    set_embedder(None)
    rows = list(VerbPhrase.objects.order_by("pk")[:3])
    VerbPhrase.objects.filter(pk__in=[r.pk for r in rows]).update(embedding=None, embedding_model="", embedding_hash="")
    VerbPhrase.objects.filter(pk=rows[1].pk).update(normalized="edited meanwhile", text="edited meanwhile")

    assert embeddings_refresh(rows=rows) == 2  # rows[1] still carries the text read before the edit

    stored = {r.pk: r for r in VerbPhrase.objects.filter(pk__in=[r.pk for r in rows])}
    assert stored[rows[1].pk].embedding is None and stored[rows[1].pk].embedding_hash == ""
    for row in (rows[0], rows[2]):
        assert stored[row.pk].embedding_hash == text_hash(row.normalized)
        assert np.allclose(stored[row.pk].embedding, get_embedder().embed(row.normalized), atol=1e-5)


@pytest.mark.django_db
def test_a_backfill_while_another_runs_does_nothing(catalogue, capsys):
    """After a change of model a backfill runs for hours and the beat starts one every few minutes: each embedded
    the same stale rows again. Now the second sees the first holds the lock and leaves."""
    from django.core.management import CommandError, call_command

    from embeddings.services import LOCK_NAMESPACE_BACKFILL
    from tests.conftest import advisory_lock_held_elsewhere

    set_embedder(None)
    VerbPhrase.objects.filter(pk=VerbPhrase.objects.order_by("pk").first().pk).update(embedding=None)
    with advisory_lock_held_elsewhere(LOCK_NAMESPACE_BACKFILL):
        assert embeddings_backfill() == {"embedded": 0, "failed": 0, "model": "", "busy": True}
        with pytest.raises(CommandError, match="Another backfill"):
            call_command("backfill_embeddings", "--no-progress")
    assert embeddings_backfill()["embedded"] == 1


class _Refusing:
    """The local model, refusing any batch that holds one of ``poison`` (a server answering 400 for that text, or a
    vector without direction), or every batch (``down``); counts its calls."""

    def __init__(self, inner, poison=(), down=False):
        self.inner, self.poison, self.down, self.calls = inner, set(poison), down, 0
        self.model_name, self.dimension, self.in_process = inner.model_name, inner.dimension, True

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        self.calls += 1
        if self.down or self.poison & set(texts):
            raise EmbeddingError("the server refused the batch")
        return self.inner.embed_batch(texts)


@pytest.mark.django_db
def test_one_text_the_embedder_refuses_fails_alone_and_the_rest_of_its_batch_is_written(catalogue):
    """A batch the embedder refuses is split down to the text it refuses: that row is the only failure (left for the
    next sweep), every other row of the batch gets its vector, on every sweep."""
    set_embedder(None)
    local = get_embedder().inner
    VerbPhrase.objects.update(embedding=None, embedding_model="", embedding_hash="")
    rows = list(VerbPhrase.objects.order_by("pk"))
    poison = rows[0].normalized  # the first row: the split that finds it goes deepest
    refusing = _Refusing(local, poison=[poison])
    set_embedder(refusing)
    try:
        totals = embeddings_backfill(batch_size=8)
    finally:
        set_embedder(None)
    assert totals["failed"] == 1 and totals["embedded"] == len(rows) - 1
    pending = embedding_rows_needing_work(VerbPhrase, current_model=local.model_name)
    assert list(pending.values_list("normalized", flat=True)) == [poison]


@pytest.mark.django_db
def test_with_the_embedder_down_the_backfill_stops_after_a_few_calls(catalogue):
    """Every batch would wait out the server's timeout and retries: after two batches of which nothing (not even the
    first or the last text alone) could be embedded, the run stops; nothing was written and the next sweep starts
    again."""
    set_embedder(None)
    local = get_embedder().inner
    VerbPhrase.objects.update(embedding=None, embedding_model="", embedding_hash="")
    total = VerbPhrase.objects.count()
    assert total >= 5 * 2  # five batches of two
    down = _Refusing(local, down=True)
    set_embedder(down)
    try:
        totals = embeddings_backfill(batch_size=2)
    finally:
        set_embedder(None)
    # each batch: both rows, then the first and the last alone (3 calls); two such batches and the run stops
    assert totals["embedded"] == 0 and down.calls == 3 * 2
    assert totals["failed"] == 4  # the rows of the two batches tried, not every row
    assert embedding_rows_needing_work(VerbPhrase, current_model=local.model_name).count() == total


@pytest.mark.django_db
def test_several_refused_texts_side_by_side_fail_alone_and_every_sweep_moves_on(catalogue):
    """Three refused texts at the start of a batch: each fails alone and the rest of the batch is written; the next
    sweep starts from them again and still embeds the rows after them."""
    set_embedder(None)
    local = get_embedder().inner
    VerbPhrase.objects.update(embedding=None, embedding_model="", embedding_hash="")
    rows = list(VerbPhrase.objects.order_by("pk"))
    poison = [r.normalized for r in rows[:3]]
    set_embedder(_Refusing(local, poison=poison))
    try:
        first = embeddings_backfill(batch_size=8)
        second = embeddings_backfill(batch_size=8)
    finally:
        set_embedder(None)
    assert first == {**first, "embedded": len(rows) - 3, "failed": 3}
    assert second == {**second, "embedded": 0, "failed": 3}
    pending = embedding_rows_needing_work(VerbPhrase, current_model=local.model_name)
    assert sorted(pending.values_list("normalized", flat=True)) == sorted(poison)
