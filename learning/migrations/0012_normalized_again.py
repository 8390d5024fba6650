"""Stored normalised texts that hold a character normalisation now drops or rewrites (typographic quotes and
dashes, characters that show nothing) normalised again, so they match what new text normalises to."""

import logging

from django.db import IntegrityError, migrations, transaction

from common.text import normalize_phrase, rewritten_pattern

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


def normalized_again(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction). A row whose new text would
    collide with a row already holding it under a unique constraint keeps its old text: the other row answers
    that text exactly, and this one still serves as a semantic anchor."""
    db = schema_editor.connection.alias
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('app.tenant_ids', true)")
        previous = cursor.fetchone()[0] or ""
        cursor.execute("SELECT set_config('app.tenant_ids', '*', true)")
    pattern = rewritten_pattern()
    for name in MODELS:
        model = apps.get_model("learning", name)
        limit = model._meta.get_field("normalized").max_length
        rows = list(model._base_manager.using(db).filter(normalized__regex=pattern).values_list("pk", "normalized"))
        changed = kept = 0
        for pk, normalized in rows:
            new = normalize_phrase(normalized)[:limit]
            if new == normalized:
                continue
            try:
                with transaction.atomic(using=db):
                    model._base_manager.using(db).filter(pk=pk).update(normalized=new)
                changed += 1
            except IntegrityError:
                kept += 1
        if changed or kept:
            logger.info("%s: %d normalised again, %d kept (another row holds the new text)", name, changed, kept)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT set_config('app.tenant_ids', %s, true)", [previous])


class Migration(migrations.Migration):
    dependencies = [("learning", "0011_learned_phrase_private_agent")]

    operations = [migrations.RunPython(normalized_again, migrations.RunPython.noop)]
