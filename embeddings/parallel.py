"""Embedding with several processes for bulk jobs (import, backfill): one model session and one thread each.

The local model computes on the CPU with one thread per session, so N processes embed N batches at once and
throughput grows with the cores. Used as a context manager around a bulk job: the process's embedder is swapped
for one that splits each call over the workers, so the job's own code path (``embeddings_compute``) is unchanged.
Only the local model is parallelised; a remote embedder already batches on its server.
"""

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

import numpy as np
from django.conf import settings

from embeddings.embedders import EmbeddingError, LocalMiniLMEmbedder, get_embedder, set_embedder

logger = logging.getLogger(__name__)

_worker_embedder: LocalMiniLMEmbedder | None = None


def _worker_init(batch_size: int) -> None:
    global _worker_embedder
    _worker_embedder = LocalMiniLMEmbedder(threads=1, batch_size=batch_size)


def _worker_embed(texts: list[str]) -> np.ndarray:
    return np.stack(_worker_embedder.embed_batch(texts))


class ParallelEmbedder:
    """Splits each batch over ``workers`` processes (length-sorted, so each slice pads to similar lengths)."""

    in_process = True

    def __init__(self, *, workers: int, model_name: str, dimension: int, batch_size: int):
        self.workers, self.model_name, self.dimension, self._batch_size = workers, model_name, dimension, batch_size
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
            initargs=(batch_size,),
        )

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts) -> list[np.ndarray]:
        texts = list(texts)
        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        size = max(1, min(self._batch_size * 4, -(-len(texts) // self.workers)))
        slices = [order[start : start + size] for start in range(0, len(order), size)]
        out: list[np.ndarray | None] = [None] * len(texts)
        try:
            for idx, matrix in zip(slices, self._pool.map(_worker_embed, [[texts[i] for i in s] for s in slices]), strict=True):
                for i, vector in zip(idx, matrix, strict=True):
                    out[i] = vector
        except Exception as exc:  # a worker that died or failed to load the model
            raise EmbeddingError(f"embedding worker failed: {exc.__class__.__name__}: {exc}") from exc
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextmanager
def embedding_workers(workers: int):
    """Within the block, the process embeds with ``workers`` processes, at most one per available core (1 or a
    remote embedder: unchanged)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    cores = available_cores()
    if workers > cores:
        logger.warning("%s embedding workers asked for; capped at %s, the cores available", workers, cores)
        workers = cores
    current = get_embedder()
    if workers == 1 or not isinstance(current.inner, LocalMiniLMEmbedder):
        if workers > 1:
            logger.info("--workers applies to the local model only; %s embeds on its server", current.model_name)
        yield current
        return
    parallel = ParallelEmbedder(
        workers=workers, model_name=current.model_name, dimension=current.dimension, batch_size=settings.EMBEDDING_BATCH_SIZE
    )
    set_embedder(parallel)
    try:
        yield parallel
    finally:
        set_embedder(current.inner)
        parallel.close()
