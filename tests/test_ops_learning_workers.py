"""--workers is capped at the cores the process may use."""

import logging
import os

import pytest

from embeddings import parallel
from embeddings.embedders import get_embedder, set_embedder


class FakeParallel:
    """Stands in for the process pool: records how many workers it was asked for."""

    def __init__(self, *, workers, model_name, dimension, batch_size):
        self.workers, self.model_name, self.dimension = workers, model_name, dimension

    def close(self):
        pass


@pytest.fixture
def local_model(monkeypatch):
    set_embedder(None)
    monkeypatch.setattr(parallel, "ParallelEmbedder", FakeParallel)
    yield
    set_embedder(None)


def test_workers_are_capped_at_the_process_affinity(local_model, monkeypatch, caplog):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    with caplog.at_level(logging.WARNING, logger="embeddings.parallel"), parallel.embedding_workers(5) as embedder:
        assert embedder.workers == 2
    assert "5 embedding workers asked for; capped at 2" in caplog.text


def test_without_affinity_the_cpu_count_caps(local_model, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    with parallel.embedding_workers(8) as embedder:
        assert embedder.workers == 3
    with parallel.embedding_workers(2) as embedder:
        assert embedder.workers == 2


def test_one_core_embeds_in_process(local_model, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    current = get_embedder()
    with parallel.embedding_workers(4) as embedder:
        assert embedder is current
