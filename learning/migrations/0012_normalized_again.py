"""Stored normalised texts that hold a character normalisation now drops or rewrites (typographic quotes and
dashes, characters that show nothing) normalised again, so they match what new text normalises to."""

import logging

from django.db import IntegrityError, connections, migrations, transaction

from common.text import normalize_phrase, rewritten_pattern
from tenants.rls import every_tenant

logger = logging.getLogger(__name__)

MODELS = [
    "VerbPhrase",
    "LearnedPhrase",
    "EntityAlias",
    "PhraseBlock",
    "LearningCandidate",
    "DisambiguationRequest",
    "LearningSignal",
    "PhraseEvidence",
    "ResolutionRecord",
]


BATCH = 2000


def _bulk_set(model, changes, db) -> None:
    """One UPDATE for a batch of (pk, new text)."""
    connection = connections[db]
    quote, pk = connection.ops.quote_name, model._meta.pk
    table = quote(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET normalized = v.n FROM unnest(%s::{pk.cast_db_type(connection)}[], %s::text[]) AS v(pk, n) "
            f"WHERE {table}.{quote(pk.column)} = v.pk",
            [[c[0] for c in changes], [c[1] for c in changes]],
        )


def _batch_write(model, changes, db) -> tuple[int, int]:
    """One UPDATE for the batch; when a row of it collides, row by row. Answers (written, kept)."""
    try:
        with transaction.atomic(using=db):
            _bulk_set(model, changes, db)
        return len(changes), 0
    except IntegrityError:
        pass
    written = 0
    for pk, new in changes:
        try:
            with transaction.atomic(using=db):
                model._base_manager.using(db).filter(pk=pk).update(normalized=new)
            written += 1
        except IntegrityError:
            pass
    return written, len(changes) - written


def _model_normalized_again(model, pattern: str, db) -> tuple[int, int]:
    limit = model._meta.get_field("normalized").max_length
    rows = model._base_manager.using(db).filter(normalized__regex=pattern).order_by("pk").values_list("pk", "normalized")
    changed = kept = last = 0
    while batch := list(rows.filter(pk__gt=last)[:BATCH]):
        last = batch[-1][0]
        changes = [(pk, new) for pk, old in batch if (new := normalize_phrase(old)[:limit]) != old]
        written, collided = _batch_write(model, changes, db) if changes else (0, 0)
        changed, kept = changed + written, kept + collided
    return changed, kept


def normalized_again(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction), in batches of one UPDATE each.
    A row whose new text would collide with a row already holding it under a unique constraint keeps its old text
    (its batch is then written row by row): the other row answers that text exactly, and this one still serves as a
    semantic anchor."""
    db = schema_editor.connection.alias
    with every_tenant(schema_editor.connection):
        pattern = rewritten_pattern()
        for name in MODELS:
            changed, kept = _model_normalized_again(apps.get_model("learning", name), pattern, db)
            if changed or kept:
                logger.info("%s: %d normalised again, %d kept (another row holds the new text)", name, changed, kept)


class Migration(migrations.Migration):
    dependencies = [("learning", "0011_learned_phrase_private_agent")]

    operations = [migrations.RunPython(normalized_again, migrations.RunPython.noop)]
