"""Mistake categories stored before they were normalised (case, width, spacing) normalised as new ones are, so
"Wrong_Target" and "wrong_target" count as one mistake. A pattern whose normalised category another pattern of the
same agent and action already holds keeps its old one and is resolved with a note naming that pattern: its records
are counted under the normalised category from the next detection on, so it would never be updated again."""

import logging

from django.db import IntegrityError, migrations, transaction
from django.utils import timezone

from common.text import label_normalize
from tenants.rls import every_tenant

logger = logging.getLogger(__name__)


def categories_normalized(apps, schema_editor):
    """Every tenant's rows (forced row-level security, local to the transaction)."""
    db = schema_editor.connection.alias
    FeedbackRecord = apps.get_model("feedback", "FeedbackRecord")
    MistakePattern = apps.get_model("feedback", "MistakePattern")
    with every_tenant(schema_editor.connection):
        _normalized(FeedbackRecord, MistakePattern, db)


def _normalized(FeedbackRecord, MistakePattern, db):
    records = FeedbackRecord._base_manager.using(db)
    for old in list(records.exclude(mistake_category="").values_list("mistake_category", flat=True).distinct()):
        new = label_normalize(old)[:60]
        if new != old:
            records.filter(mistake_category=old).update(mistake_category=new)
    patterns = MistakePattern._base_manager.using(db)
    kept = 0
    for pk, agent_id, action_id, old in list(patterns.values_list("pk", "agent_id", "action_id", "category")):
        new = label_normalize(old)[:60]
        if new == old:
            continue
        try:
            with transaction.atomic(using=db):
                patterns.filter(pk=pk).update(category=new)
        except IntegrityError:
            kept += 1
            twin = patterns.filter(agent_id=agent_id, action_id=action_id, category=new).values_list("pk", flat=True)
            patterns.filter(pk=pk).update(
                status="resolved",
                resolved_at=timezone.now(),
                resolution_notes=f"the same category as pattern {twin.first()}, spelt another way; counted there now",
            )
    if kept:
        logger.info("%d mistake pattern(s) kept their category: another pattern holds the normalised one", kept)


class Migration(migrations.Migration):
    dependencies = [("feedback", "0005_correction_rules_per_pattern")]

    operations = [migrations.RunPython(categories_normalized, migrations.RunPython.noop)]
