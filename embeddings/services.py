"""Writes of vectors: compute, assign, refresh, and the backfill of missing or stale ones."""

import logging
from collections.abc import Sequence

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from tqdm import tqdm

from common.db import advisory_try_lock
from common.text import text_hash
from embeddings.embedders import embed_batch_bounded, get_embedder
from embeddings.selectors import Sha256Hex, embedded_models, embedding_rows_needing_work

logger = logging.getLogger(__name__)


def embeddings_compute(*, texts: Sequence[str]) -> tuple[list | None, str]:
    """Vectors for ``texts`` (None if the embedder fails, or on a request path does not answer within the
    request's embedding budget: the rows are stored without vectors and the backfill fills them) and the model name."""
    if not texts:
        return [], ""
    return embed_batch_bounded(texts)


def embeddings_by_text(*, texts: Sequence[str], progress: bool = False) -> tuple[dict, str]:
    """Vectors of many ``texts`` by text, and the model name: distinct texts embedded in batches of
    LEARNING_IMPORT_BATCH_SIZE, sorted by length so each batch pads to similar lengths (``progress``: a tqdm bar).
    A batch the embedder fails is left out: its rows are stored without vectors and the backfill fills them."""
    todo = sorted(dict.fromkeys(texts), key=len)
    out, model, batch = {}, "", settings.LEARNING_IMPORT_BATCH_SIZE
    with tqdm(total=len(todo), desc="embedding", unit="phrase", disable=not progress or not todo) as bar:
        for start in range(0, len(todo), batch):
            chunk = todo[start : start + batch]
            vectors, name = embeddings_compute(texts=chunk)
            if vectors is not None:
                model = name
                out.update(zip(chunk, vectors, strict=True))
            bar.update(len(chunk))
    return out, model


def embedding_assign(*, rows: Sequence[Model], vectors: list | None, model: str) -> None:
    """Set vector, model and text hash on unsaved rows (no-op without vectors)."""
    if vectors is None:
        return
    for row, vector in zip(rows, vectors, strict=False):
        row.embedding = vector
        row.embedding_model = model
        row.embedding_hash = text_hash(row.embedding_text)


def _vectors_write(*, rows: Sequence[Model], model: str) -> int:
    """Write the assigned vector, model and hash of ``rows`` (all of one model) in one UPDATE, each only where the
    row's text still hashes to what was embedded: a row whose text changed meanwhile (a writer that may have stored
    the new text's vector) is left alone, and the next sweep sees it. Answers how many rows were written."""
    table = type(rows[0])._meta
    quote = connection.ops.quote_name
    pk, text = table.pk, table.get_field(type(rows[0]).embedded_field)
    vector_field = table.get_field("embedding")
    current_hash = Sha256Hex.template % {"expressions": f"t.{quote(text.column)}"}
    sql = (
        f"UPDATE {quote(table.db_table)} AS t SET {quote(vector_field.column)} = v.vector::vector, "
        f"{quote(table.get_field('embedding_model').column)} = %s, {quote(table.get_field('embedding_hash').column)} = v.hash "
        f"FROM unnest(%s::{pk.cast_db_type(connection)}[], %s::text[], %s::text[]) AS v(pk, hash, vector) "
        f"WHERE t.{quote(pk.column)} = v.pk AND {current_hash} = v.hash"
    )
    params = [
        model,
        [r.pk for r in rows],
        [r.embedding_hash for r in rows],
        [vector_field.get_prep_value(r.embedding) for r in rows],
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _rows_refresh(*, rows: Sequence[Model]) -> tuple[int, int]:
    """Embed ``rows`` and write the vectors of those whose text is unchanged: (written, skipped as changed);
    (0, 0) when the embedder fails."""
    vectors, model = embeddings_compute(texts=[r.embedding_text for r in rows])
    if vectors is None:
        return 0, 0
    embedding_assign(rows=rows, vectors=vectors, model=model)
    written = _vectors_write(rows=rows, model=model)
    if written < len(rows):
        logger.info(
            "%d %s row(s) changed text while embedded; left for the next sweep", len(rows) - written, type(rows[0]).__name__
        )
    return written, len(rows) - written


def embeddings_refresh(*, rows: Sequence[Model]) -> int:
    """Embed ``rows`` (all of one model) and save only their vector fields, for each row only if its text is still
    the one embedded; answer how many were written."""
    if not rows:
        return 0
    return _rows_refresh(rows=rows)[0]


# A backfill run stops after this many batches in a row of which nothing could be embedded (the embedder is down:
# each further batch would wait out its timeout and retries); the next sweep starts again.
DEAD_BATCHES_MAX = 2


def embeddings_batches_refresh(*, pending, batch_size: int, update=None) -> tuple[int, int]:
    """``_batches_refresh`` answering (embedded, failed)."""
    embedded, failed, _ = _batches_refresh(pending=pending, batch_size=batch_size, update=update)
    return embedded, failed


def _batches_refresh(*, pending, batch_size: int, update=None, dead: int = 0) -> tuple[int, int, int]:
    """Embed the rows of ``pending`` (one model's rows needing a vector) in batches by primary key, each batch
    committed on its own (resumable). ``update(n)`` is called after each batch (a progress bar). Answers (embedded,
    failed); a row whose text changed while its batch was embedded is neither (not written: the next sweep sees it
    if it still needs a vector).

    A batch the embedder refuses is asked for again as its first text, its last text and the rest: when any of them
    is embedded the embedder works and refuses some texts, and the parts it refuses are split in halves down to
    those texts, which fail alone (logged, left for the next sweep) while the rest of the batch is written. When
    neither end is embedded either, nothing of the batch is; after ``DEAD_BATCHES_MAX`` such batches in a row the
    run stops (the embedder is down) and the next sweep starts again. ``dead``: such batches in a row before this
    table's (a run over several tables). Answers (embedded, failed, dead batches in a row at the end)."""
    embedded = failed = last_pk = 0

    def attempt(rows) -> tuple[int, int] | None:
        """(written, changed meanwhile), or None when the embedder refused the whole group."""
        try:
            done, changed = _rows_refresh(rows=rows)
        except Exception:  # count and go on: one bad text must not stop the rest
            logger.exception("embedding %d %s row(s) from pk %s failed", len(rows), type(rows[0]).__name__, rows[0].pk)
            return None
        return (done, changed) if done or changed else None

    def refused(row) -> None:
        """A text the embedder refuses while it embeds others: left for the next sweep, without the vector of another
        model it may carry (compared with nothing under this one), so the row waits for its first vector instead and
        no longer holds a change of model open (resolve's "re-embedding", the prior's refresh)."""
        logger.warning("%s pk %s could not be embedded; left for the next sweep", type(row).__name__, row.pk)
        current = get_embedder().model_name
        if row.embedding_model not in ("", current):
            type(row).objects.filter(pk=row.pk, embedding_model=row.embedding_model).update(
                embedding=None, embedding_model="", embedding_hash=""
            )

    def split(rows) -> tuple[int, int]:
        """``rows``, refused together: in halves, down to the rows refused alone."""
        if len(rows) == 1:
            refused(rows[0])
            return 0, 0
        half = len(rows) // 2
        parts = [attempt(part) or split(part) for part in (rows[:half], rows[half:])]
        return parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]

    while dead < DEAD_BATCHES_MAX:
        rows = list(pending.filter(pk__gt=last_pk).order_by("pk")[:batch_size])
        if not rows:
            break
        last_pk = rows[-1].pk
        got = attempt(rows)
        if got is None and len(rows) > 1:
            ends = [attempt(rows[:1]), attempt(rows[-1:])]
            if any(end is not None for end in ends):  # the embedder answers: it refuses some of these texts
                for row, end in zip((rows[0], rows[-1]), ends, strict=True):
                    if end is None:
                        refused(row)
                inner = rows[1:-1]
                middle = (attempt(inner) or split(inner)) if inner else (0, 0)
                parts = [end or (0, 0) for end in ends] + [middle]
                got = sum(p[0] for p in parts), sum(p[1] for p in parts)
        done, changed = got or (0, 0)
        dead = 0 if done or changed else dead + 1
        embedded += done
        failed += len(rows) - done - changed
        if update:
            update(len(rows))
    if dead >= DEAD_BATCHES_MAX:
        logger.warning(
            "embedding stopped after %d batches in a row of which nothing was embedded (the embedder is down?); the next sweep goes on",
            dead,
        )
    return embedded, failed, dead


# One backfill at a time: after a change of model it runs for hours, and the beat starts another every few minutes,
# which would embed the same stale rows again (a remote embedder's bill twice over).
LOCK_NAMESPACE_BACKFILL = 61005


def embeddings_backfill(*, batch_size: int = 128, progress=None) -> dict:
    """Embed every row whose vector is missing or stale, one committed batch at a time (resumable); nothing (and
    ``"busy": True``) while another backfill runs.

    ``progress(model, total)`` may return a callable ``update(n)`` for a progress bar.
    Answers {"embedded": n, "failed": n, "model": name, "busy": bool}; raises EmbeddingError if the embedder cannot
    load.
    """
    with advisory_try_lock(LOCK_NAMESPACE_BACKFILL) as held:
        if not held:
            logger.info("embedding backfill: another one is running; this one does nothing")
            return {"embedded": 0, "failed": 0, "model": "", "busy": True}
        return _backfill(batch_size=batch_size, progress=progress)


def _backfill(*, batch_size: int, progress) -> dict:
    model_name = get_embedder().model_name
    totals = {"embedded": 0, "failed": 0, "model": model_name, "busy": False}
    dead = 0  # batches in a row of which nothing was embedded, over all tables
    for model in embedded_models():
        pending = embedding_rows_needing_work(model, current_model=model_name)
        total = pending.count()
        if not total:
            continue
        done, failed, dead = _batches_refresh(
            pending=pending, batch_size=batch_size, update=progress(model, total) if progress else None, dead=dead
        )
        totals["embedded"] += done
        totals["failed"] += failed
        if dead >= DEAD_BATCHES_MAX:  # the embedder is down: the dead batches in a row count across tables
            totals["stopped"] = True
            break
    return totals
