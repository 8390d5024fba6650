"""Erasure of one user's learning data (a data subject's request): every row that names the user, and its history."""

from collections import defaultdict
from collections.abc import Collection

from django.db import transaction
from django.db.models import Count, F, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce, Greatest

from learning.models import (
    DecisionHead,
    DisambiguationRequest,
    EntityAlias,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    PhraseImportJob,
    ResolutionRecord,
)
from learning.selectors import decision_cache_clear
from learning.services.decisions import heads_lock
from learning.services.phrases import user_learning_lock

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
    PhraseImportJob,
)


# The global candidates an erasure may delete or recount: those a reviewer approved are the tenant's vocabulary.
UNADOPTED = (LearningCandidate.Status.PENDING, LearningCandidate.Status.REJECTED)


def _global_candidate_clicks(user_id: str) -> dict[int, int]:
    """Per global candidate, how many of its occurrences are this user's clicks: a click the signals' processing
    accumulated in the user's scope counts one occurrence toward the global candidate of the same text and verb,
    and its signal names that candidate (``global_candidate_id``)."""
    counted = (
        LearningSignal.objects.filter(Q(user_id=user_id) | Q(request__user_id=user_id), global_candidate_id__isnull=False)
        .values("global_candidate_id")
        .annotate(n=Count("id"))
        .values_list("global_candidate_id", "n")
    )
    return dict(counted)


def _global_candidates_only_of(user_id: str) -> list[int]:
    """Pending or rejected global candidates every occurrence of which is one of this user's clicks
    (``_global_candidate_clicks``): they hold only this user's words. One others proposed too (another user, an
    agent, a correction) has more occurrences, and stays; so does one whose clicks are no longer known (their
    disambiguations purged after ``RESOLUTION_RETENTION_DAYS``, or counted before signals named the candidate),
    and one a reviewer approved."""
    clicks = _global_candidate_clicks(user_id)
    if not clicks:
        return []
    unadopted = LearningCandidate.objects.filter(pk__in=list(clicks), user_id__isnull=True, status__in=UNADOPTED)
    return sorted(pk for pk, occurrences in unadopted.values_list("pk", "occurrence_count") if occurrences <= clicks[pk])


def _shared_candidates_recount(clicks: dict[int, int], erased: list[int]) -> None:
    """The pending or rejected global candidates the erasure keeps (others proposed them too) lose the user's
    clicks from their occurrences, so the erasure of their last proposer deletes them: one relative update (a click
    counted meanwhile adds its own) per number of clicks the user gave a candidate, never below the clicks of others
    its signals still record, nor below one. The caller holds their rows (``user_learning_erase``)."""
    others = (
        LearningSignal.objects.filter(global_candidate_id=OuterRef("pk"))
        .order_by()
        .values("global_candidate_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    kept = sorted(set(clicks) - set(erased))  # locked by the erasure already, with the others, in key order
    by_clicks: dict[int, list[int]] = defaultdict(list)
    for pk in kept:
        by_clicks[clicks[pk]].append(pk)
    for n, pks in sorted(by_clicks.items()):
        LearningCandidate.objects.filter(pk__in=pks, user_id__isnull=True, status__in=UNADOPTED).update(
            occurrence_count=Greatest(
                F("occurrence_count") - n,
                Coalesce(Subquery(others, output_field=IntegerField()), Value(0)),
                Value(1),
            )
        )


def erasure_candidate_ids(*, user_id: str) -> tuple[list[int], list[int]]:
    """The candidates an erasure of the user deletes that a reviewer may be deciding (for the review items' locks
    the erasure takes first): the user's own pending ones and the global ones only the user's clicks proposed
    (``_global_candidates_only_of``); and those global ones alone (for ``user_learning_erase``, which reads them
    again once it holds the rows)."""
    own = LearningCandidate.objects.filter(user_id=user_id, status=LearningCandidate.Status.PENDING).values_list("pk", flat=True)
    global_only = _global_candidates_only_of(user_id)
    return sorted({*own, *global_only}), global_only


def _of_user(model, user_id: str, global_candidates: list[int]):
    if model is LearningSignal:  # a click's signals, whoever the request named
        return LearningSignal.objects.filter(Q(user_id=user_id) | Q(request__user_id=user_id))
    if model is LearningCandidate:
        return LearningCandidate.objects.filter(Q(user_id=user_id) | Q(pk__in=global_candidates))
    return model.objects.filter(user_id=user_id)


def _history_of_user(model, user_id: str, global_candidates: list[int]):
    named = Q(user_id=user_id)
    if model is LearningCandidate:
        named |= Q(id__in=global_candidates)
    return model.history.model.objects.filter(named)


def user_learning_erase(
    *,
    user_id: str,
    dry_run: bool = False,
    global_candidates: list[int] | None = None,
    ids_of: Collection[str] | None = None,
) -> dict:
    """Delete, in the caller's tenant scope and in one transaction, every learning row of ``user_id``: their own
    phrases, aliases, blocks and candidates, their disambiguations and signals, their evidence, the records of what
    was resolved for them (the fit's labels) and their own classifier heads; then every audit-trail row that names
    them (a deletion writes one more). Global rows hold no user: a global phrase stays, as the tenant's vocabulary,
    and so does a global candidate others proposed too (less the user's clicks, ``_shared_candidates_recount``); a
    pending or rejected global candidate only the user's clicks proposed goes (``_global_candidates_only_of``).
    ``dry_run``: count only (the audit-trail rows counted include the one each deletion would write).
    ``global_candidates``: those global candidates as the caller read them moments ago (``erasure_candidate_ids``),
    so they are not read twice before the rows are locked (they are read again after). ``ids_of``: the models (by
    lower-case label, ``app.model``) whose row ids to answer (None: all), for the logs that name them.

    The user's learning lock is taken first, exclusive (``user_learning_lock``: a confirmation, a correction or an
    import of the user's running meanwhile finishes first, one arriving waits); then the user's disambiguation
    requests, in key order, as a click (``disambiguation_select``) and its learning
    (``disambiguation_signals_process``) lock theirs first: one of them running meanwhile finishes before the
    erasure reads what to delete, or finds its request gone. The heads' lock it takes next is the tenant's: two
    erasures run one after the other, and the second sees the first's recount of a candidate both users proposed
    (the erasure of the last proposer deletes it).

    Answers ``{"rows": {table: n}, "history": {table: n}, "objects": {model label: ids}}``: the ids of every row of
    the user's, and of those deleted before that the audit trail knew (of the models ``ids_of`` names)."""
    rows, history, objects = {}, {}, {}
    with transaction.atomic():
        if not dry_run:
            # the user's writers that add several rows (a confirmation, a correction, an import) finish first, or
            # wait: an erasure never sees part of what one of them wrote
            user_learning_lock(user_id=user_id, exclusive=True)
            # a refit storing heads meanwhile commits first (its head of this user is then deleted here), or stores
            # after this commits and finds the user's phrases gone (it drops their head)
            heads_lock()
            # the user's requests first (a click and its learning lock theirs first), then the rows an approval or a
            # correction locks, each in key order, as they do
            list(DisambiguationRequest.objects.filter(user_id=user_id).order_by("pk").select_for_update().values_list("pk"))
        if global_candidates is None or dry_run:
            global_candidates = _global_candidates_only_of(user_id)
        if not dry_run:
            clicks = _global_candidate_clicks(user_id)  # the user's requests are locked: their signals stay as read
            # every candidate the erasure may delete or recount, in one pass in key order as a reviewer's decision
            # on several locks them: the user's own, and the pending or rejected global ones the user's clicks
            # counted toward (those only the user proposed among them)
            candidates = LearningCandidate.objects.filter(
                Q(user_id=user_id) | Q(pk__in=list(clicks), user_id__isnull=True, status__in=UNADOPTED)
            )
            list(candidates.order_by("pk").select_for_update().values_list("pk"))
            list(_of_user(LearnedPhrase, user_id, global_candidates).order_by("pk").select_for_update().values_list("pk"))
            # locked: a click processed meanwhile may have added an occurrence, a reviewer approved one; read again
            global_candidates = _global_candidates_only_of(user_id)
        for model in USER_MODELS:
            if ids_of is not None and model._meta.label_lower not in ids_of:
                continue
            ids = set(_of_user(model, user_id, global_candidates).values_list("pk", flat=True))
            if hasattr(model, "history"):
                ids |= set(_history_of_user(model, user_id, global_candidates).values_list("id", flat=True))
            objects[model._meta.label] = sorted(ids)
        for model in USER_MODELS:
            qs = _of_user(model, user_id, global_candidates)
            rows[model._meta.db_table] = qs.count() if dry_run else qs.delete()[1].get(model._meta.label, 0)
        if not dry_run:
            _shared_candidates_recount(clicks, global_candidates)
        for model in USER_MODELS:
            if hasattr(model, "history"):
                qs = _history_of_user(model, user_id, global_candidates)
                table = model.history.model._meta.db_table
                # a deletion writes one audit-trail row per row deleted: a dry run counts it too
                history[table] = qs.count() + rows[model._meta.db_table] if dry_run else qs.delete()[0]
        if not dry_run:
            transaction.on_commit(decision_cache_clear)  # this process forgets the user's heads at once
    rows = {k: v for k, v in rows.items() if v}
    history = {k: v for k, v in history.items() if v}
    return {"rows": rows, "history": history, "objects": objects}
