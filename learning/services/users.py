"""Erasure of one user's learning data (a data subject's request): every row that names the user, and its history."""

import logging

from django.db import transaction

from learning.models import (
    DecisionHead,
    DisambiguationRequest,
    EntityAlias,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    ResolutionRecord,
)
from learning.selectors import decision_cache_clear

logger = logging.getLogger(__name__)

# In the order they are deleted: signals before the requests they belong to (abandon events go with their request).
USER_MODELS = (
    LearnedPhrase,
    EntityAlias,
    PhraseBlock,
    LearningCandidate,
    LearningSignal,
    DisambiguationRequest,
    PhraseEvidence,
    ResolutionRecord,
    DecisionHead,
)


def user_learning_erase(*, user_id: str, dry_run: bool = False) -> dict:
    """Delete, in the caller's tenant scope and in one transaction, every learning row of ``user_id``: their own
    phrases, aliases, blocks and candidates, their disambiguations and signals, their evidence, the records of what
    was resolved for them (the fit's labels) and their own classifier heads; then every audit-trail row that names
    them (a deletion writes one more). Global rows hold no user: a global phrase or candidate the user's clicks
    helped make stays, as the tenant's vocabulary. ``dry_run``: count only.

    Answers ``{"rows": {table: n}, "history": {table: n}, "candidate_ids": [...]}`` (the candidates, so the review
    log can drop their texts)."""
    rows, history = {}, {}
    with transaction.atomic():
        candidate_ids = list(LearningCandidate.objects.filter(user_id=user_id).values_list("pk", flat=True))
        for model in USER_MODELS:
            qs = model.objects.filter(user_id=user_id)
            rows[model._meta.db_table] = qs.count() if dry_run else qs.delete()[1].get(model._meta.label, 0)
        for model in USER_MODELS:
            if not hasattr(model, "history"):
                continue
            qs = model.history.model.objects.filter(user_id=user_id)
            history[model.history.model._meta.db_table] = qs.count() if dry_run else qs.delete()[0]
        if not dry_run:
            transaction.on_commit(decision_cache_clear)  # this process forgets the user's heads at once
    rows = {k: v for k, v in rows.items() if v}
    history = {k: v for k, v in history.items() if v}
    if not dry_run:
        logger.info("erased the learning data of a user: %s rows, %s audit-trail rows", sum(rows.values()), sum(history.values()))
    return {"rows": rows, "history": history, "candidate_ids": candidate_ids}
