"""How long the audit trail (django-simple-history) is kept. Apart from ``common/history.py``, which every model
imports: this reads the models' history tables."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from simple_history.models import registered_models

from common.api import ApplicationError
from common.db import rows_purge
from common.validation import MAX_DAYS

logger = logging.getLogger(__name__)


def history_purge(*, days: int | None = None, dry_run: bool = False) -> dict:
    """Delete audit-trail rows older than HISTORY_RETENTION_DAYS, in batches: every change of an object but its
    latest, and the whole trail of an object deleted before then. The latest row of an object that still exists is
    kept however old (who made it what it is). Answers the rows deleted per historical table (``dry_run``: the rows
    it would delete, nothing deleted)."""
    days = settings.HISTORY_RETENTION_DAYS if days is None else days
    if not 1 <= days <= MAX_DAYS:
        raise ApplicationError(f"The retention of the audit trail must be 1 to {MAX_DAYS} days (got {days}).", field="days")
    cutoff = timezone.now() - timedelta(days=days)
    deleted = {}
    for model in sorted(registered_models.values(), key=lambda m: m._meta.label):
        historical = model.history.model
        newer = historical.objects.filter(id=OuterRef("id")).filter(
            Q(history_date__gt=OuterRef("history_date"))
            | Q(history_date=OuterRef("history_date"), history_id__gt=OuterRef("history_id"))
        )
        old = historical.objects.filter(history_date__lt=cutoff).filter(Q(Exists(newer)) | Q(history_type="-"))
        count = rows_purge(old, dry_run=dry_run)
        if count:
            deleted[historical._meta.db_table] = count
            if not dry_run:
                logger.info("purged %d row(s) of %s older than %d day(s)", count, historical._meta.label, days)
    return deleted
