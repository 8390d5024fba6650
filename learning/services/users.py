"""Erasure of one user's learning data (a data subject's request): every row that names the user, and its history."""

from django.db import transaction
from django.db.models import Q

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


def _of_user(model, user_id: str):
    if model is LearningSignal:  # a click's signals, whoever the request named
        return LearningSignal.objects.filter(Q(user_id=user_id) | Q(request__user_id=user_id))
    return model.objects.filter(user_id=user_id)


def user_learning_erase(*, user_id: str, dry_run: bool = False) -> dict:
    """Delete, in the caller's tenant scope and in one transaction, every learning row of ``user_id``: their own
    phrases, aliases, blocks and candidates, their disambiguations and signals, their evidence, the records of what
    was resolved for them (the fit's labels) and their own classifier heads; then every audit-trail row that names
    them (a deletion writes one more). Global rows hold no user: a global phrase or candidate the user's clicks
    helped make stays, as the tenant's vocabulary. ``dry_run``: count only.

    The user's disambiguation requests are locked first, in key order, as a click (``disambiguation_select``) and its
    learning (``disambiguation_signals_process``) lock theirs first: one of them running meanwhile finishes before
    the erasure reads what to delete, or finds its request gone.

    Answers ``{"rows": {table: n}, "history": {table: n}, "objects": {model label: ids}}``: the ids of every object
    of the user's that the audit trail knew (deleted ones included), for the logs that name them."""
    rows, history, objects = {}, {}, {}
    with transaction.atomic():
        if not dry_run:
            # the user's requests first (a click and its learning lock theirs first), then the rows an approval or a
            # correction locks, each in key order, as they do
            for model in (DisambiguationRequest, LearningCandidate, LearnedPhrase):
                list(model.objects.filter(user_id=user_id).order_by("pk").select_for_update().values_list("pk"))
        for model in USER_MODELS:
            if hasattr(model, "history"):
                ids = set(model.objects.filter(user_id=user_id).values_list("pk", flat=True))
                ids |= set(model.history.model.objects.filter(user_id=user_id).values_list("id", flat=True))
                objects[model._meta.label] = sorted(ids)
        for model in USER_MODELS:
            qs = _of_user(model, user_id)
            rows[model._meta.db_table] = qs.count() if dry_run else qs.delete()[1].get(model._meta.label, 0)
        for model in USER_MODELS:
            if hasattr(model, "history"):
                qs = model.history.model.objects.filter(user_id=user_id)
                history[model.history.model._meta.db_table] = qs.count() if dry_run else qs.delete()[0]
        if not dry_run:
            transaction.on_commit(decision_cache_clear)  # this process forgets the user's heads at once
    rows = {k: v for k, v in rows.items() if v}
    history = {k: v for k, v in history.items() if v}
    return {"rows": rows, "history": history, "objects": objects}
