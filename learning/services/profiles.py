"""Fitting, activating and retiring resolution profiles."""

import logging

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from common.api import ApplicationError
from embeddings.services import embeddings_compute
from learning import fitting, selectors
from learning.models import FittedResolutionProfile
from learning.resolution import profile
from learning.selectors import active_profile_cache_clear

logger = logging.getLogger(__name__)


# --- Disambiguation feedback loop: fitting resolve threshold and margin ---


def resolution_profile_fit(
    *, held_out_share: float | None = None, max_wrong_pct: float | None = None, limit: int | None = None
) -> "FittedResolutionProfile":
    """Fit threshold and margin on gold labels (clicks, corrections) and store them as a *proposed* profile.

    Scores are recomputed leave-one-out (the text's own learned rows left out, else every
    example would be an exact match); a hashed share is held out and both the profile in
    force and the fitted one are measured on it, for the reviewer who activates it.
    """

    held_out_share = settings.FEEDBACK_FIT_HELD_OUT_SHARE if held_out_share is None else held_out_share
    max_wrong_pct = settings.FEEDBACK_FIT_MAX_WRONG_PCT if max_wrong_pct is None else max_wrong_pct
    if not isinstance(held_out_share, (int, float)) or not 0.0 < held_out_share < 1.0:  # NaN fails the comparison
        raise ApplicationError("The held-out share must be between 0 and 1.", field="held_out_share")
    if not isinstance(max_wrong_pct, (int, float)) or not 0.0 < max_wrong_pct < 100.0:
        raise ApplicationError(
            f"The maximum wrong percentage must be a number above 0 and below 100, not {max_wrong_pct!r}.",
            field="max_wrong_pct",
        )
    gold = selectors.gold_labels(limit=limit or settings.FEEDBACK_FIT_MAX_EXAMPLES)
    if len(gold) < settings.FEEDBACK_FIT_MIN_EXAMPLES:
        raise ApplicationError(
            f"{len(gold)} gold labels; at least {settings.FEEDBACK_FIT_MIN_EXAMPLES} are needed to fit.",
            field="gold_labels",
            code="too_few_labels",
        )
    vectors, model = embeddings_compute(texts=[n for n, _, _ in gold])
    if vectors is None:
        raise ApplicationError("The embedder is unavailable; try again later.", field="embedder", code="embedder_unavailable")
    p = profile(model)  # the profile in force (an active fitted profile included): the baseline
    scores = []
    for (normalized, user_id, verb), vector in zip(gold, vectors, strict=False):
        ranked = selectors.leave_one_out_scores(normalized=normalized, user_id=user_id, vector=vector, model=model, p=p)
        if not ranked:
            continue
        second = ranked[1][1] if len(ranked) > 1 else 0.0
        scores.append(fitting.GoldScore(f"{user_id}|{normalized}", ranked[0][1], second, ranked[0][0] == verb))
    train, held_out = fitting.split(scores, held_out_share)
    if not train or not held_out:
        raise ApplicationError("Too few labels on one side of the split.", field="held_out_share", code="too_few_labels")
    threshold, margin, train_figures = fitting.fit(train, max_wrong_pct=max_wrong_pct)
    with transaction.atomic():
        return FittedResolutionProfile.objects.create(
            embedding_model=model,
            resolve_threshold=threshold,
            margin=margin,
            max_wrong_pct=max_wrong_pct,
            gold_count=len(scores),
            train_count=len(train),
            held_out_count=len(held_out),
            baseline={"resolve_threshold": p["resolve_threshold"], "margin": p["margin"]},
            held_out_current=fitting.evaluate(held_out, p["resolve_threshold"], p["margin"]),
            held_out_fitted=fitting.evaluate(held_out, threshold, margin),
            train_fitted=train_figures,
        )


def resolution_profile_activate(*, fitted, reviewer=None):
    """Put a fitted profile live for its tenant and model (the one active before is retired). A retired profile
    stays out of service: fit a new one."""

    with transaction.atomic():
        with connection.cursor() as cursor:  # one activation at a time per tenant and model: the second retires the first
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"learning:profile:{fitted.tenant_id}:{fitted.embedding_model}"],
            )
        row = FittedResolutionProfile.objects.select_for_update().get(pk=fitted.pk)
        if row.status == FittedResolutionProfile.Status.ACTIVE:
            return row
        if row.status == FittedResolutionProfile.Status.RETIRED:
            raise ApplicationError(
                f"Profile {row.pk} is retired and stays out of service; fit a new profile instead.", field="profile"
            )
        FittedResolutionProfile.objects.filter(
            tenant_id=row.tenant_id, embedding_model=row.embedding_model, status=FittedResolutionProfile.Status.ACTIVE
        ).update(status=FittedResolutionProfile.Status.RETIRED)
        row.status = FittedResolutionProfile.Status.ACTIVE
        row.activated_at = timezone.now()
        row.activated_by = reviewer if getattr(reviewer, "pk", None) else None
        row.save(update_fields=["status", "activated_at", "activated_by"])
    active_profile_cache_clear()
    logger.info("fitted resolution profile %s is live for %s", row.pk, row.embedding_model)
    return row


def resolution_profile_retire(*, fitted):
    """Take a fitted profile out of service (the settings' values apply again)."""

    with transaction.atomic():
        FittedResolutionProfile.objects.filter(pk=fitted.pk).update(status=FittedResolutionProfile.Status.RETIRED)
    active_profile_cache_clear()
