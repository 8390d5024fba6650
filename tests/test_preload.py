"""A web process loads the embedder as it starts (``learning.preload``, run by config.wsgi and config.asgi): each
gunicorn worker, not only the one a readiness probe reaches, serves its first request warm."""

import logging

import numpy as np

from embeddings import embedders
from embeddings.embedders import EmbeddingError
from learning.preload import preload


class _InProcess:
    model_name = "in-process"
    dimension = 384
    in_process = True

    def __init__(self):
        self.calls = []

    def embed_batch(self, texts, **kwargs):
        self.calls.append(list(texts))
        return [np.eye(384, dtype=np.float32)[0] for _ in texts]


def test_preload_loads_the_embedder_and_runs_it_once(monkeypatch):
    inner = _InProcess()
    monkeypatch.setattr(embedders, "_embedder", None)
    monkeypatch.setattr(embedders, "build_embedder", lambda: inner)
    preload()
    assert embedders._embedder is not None and embedders._embedder.inner is inner
    assert inner.calls == [["warm"]]


def test_an_embedder_that_cannot_load_at_start_is_logged_and_the_process_starts(monkeypatch, caplog):
    def fail():
        raise EmbeddingError("model file missing")

    monkeypatch.setattr(embedders, "_embedder", None)
    monkeypatch.setattr(embedders, "build_embedder", fail)
    with caplog.at_level(logging.WARNING, logger="learning.preload"):
        preload()  # no exception: /readyz answers 503 naming the embedder until it loads
    assert "model file missing" in caplog.text
    assert embedders._embedder is None
