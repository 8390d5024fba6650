"""Correction rules drawn from mistake patterns: create, approve, deactivate, expire."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone
from simple_history.utils import bulk_create_with_history

from common.api import Conflict, Forbidden, NotFound
from feedback.models import CorrectionRule, CorrectionRuleStatus, FeedbackRecord, MistakePattern, PatternStatus
from feedback.selectors import OPEN_RULE_STATUSES, patterns_wanting_rule
from feedback.services.mistakes import detection_lock

logger = logging.getLogger(__name__)


def _rule_precondition(pattern, explanations: list[tuple[str, int]]) -> str:
    head = f"When {pattern.agent.name} is about to run {pattern.action.name}"
    what = f"it has made this mistake {pattern.occurrence_count} times ({pattern.category})"
    if not explanations:
        return f"{head}: {what}. Ask for review."
    said = "; ".join(f'"{text}"' + (f" ({n}×)" if n > 1 else "") for text, n in explanations)
    return f"{head}: {what}. Feedback said: {said}."


def correction_rules_create(
    *, agent_id: int | None = None, pattern_ids: list[int] | None = None, user=None
) -> list[CorrectionRule]:
    """A rule for every active pattern without a rule pending or in force (optionally only ``pattern_ids``); patterns
    become mitigated.

    The precondition is built from the most common explanations, the correction is
    the most common corrected action (or ``{"require_review": true}``). Rules are
    active at once unless ``CORRECTION_RULES_REQUIRE_APPROVAL``; they expire after
    ``CORRECTION_RULE_EXPIRY_DAYS``. Contributing records not linked to a rule yet are
    linked to the new one (records of an earlier, expired rule keep theirs).
    """

    now = timezone.now()
    with transaction.atomic():
        # under detection's lock: a detection running meanwhile reads the rules drawn here, or runs before them
        if agent_id is not None:
            detection_lock(agent_ids=[agent_id])
        elif pattern_ids is not None:
            detection_lock(agent_ids=list(MistakePattern.objects.filter(pk__in=pattern_ids).values_list("agent_id", flat=True)))
        else:
            detection_lock(agent_ids=None)
        qs = patterns_wanting_rule().select_for_update(of=("self",)).select_related("agent", "action").order_by("id")
        if agent_id is not None:
            qs = qs.filter(agent_id=agent_id)
        if pattern_ids is not None:
            qs = qs.filter(pk__in=pattern_ids)
        patterns = list(qs)
        if not patterns:
            return []
        top: dict[int, list[tuple[str, int]]] = {}
        rows = (
            FeedbackRecord.objects.filter(pattern_id__in=[p.pk for p in patterns])
            .exclude(human_explanation="")
            .values_list("pattern_id", "human_explanation")
            .annotate(n=Count("id"))
            .order_by("pattern_id", "-n", "human_explanation")
        )
        for pid, text, n in rows:
            if len(top.setdefault(pid, [])) < 3:
                top[pid].append((text[:300], n))
        approval = settings.CORRECTION_RULES_REQUIRE_APPROVAL
        expires = now + timedelta(days=settings.CORRECTION_RULE_EXPIRY_DAYS) if settings.CORRECTION_RULE_EXPIRY_DAYS > 0 else None
        rules = [
            CorrectionRule(
                agent_id=p.agent_id,
                action_id=p.action_id,
                pattern=p,
                precondition=_rule_precondition(p, top.get(p.pk, [])),
                correction=p.common_correction if p.common_correction is not None else {"require_review": True},
                require_review=p.common_correction is None,
                status=CorrectionRuleStatus.PENDING if approval else CorrectionRuleStatus.ACTIVE,
                expires_at=expires,
                created_at=now,
            )
            for p in patterns
        ]
        rules = bulk_create_with_history(rules, CorrectionRule, default_user=user, default_change_reason="created from pattern")
        if any(r.pk is None for r in rules):  # older backends: fetch the ids
            by_pattern = dict(
                CorrectionRule.objects.filter(pattern__in=patterns, status__in=OPEN_RULE_STATUSES).values_list("pattern_id", "id")
            )
            for r in rules:
                r.pk = r.id = by_pattern[r.pattern_id]
        MistakePattern.objects.filter(pk__in=[p.pk for p in patterns]).update(status=PatternStatus.MITIGATED, updated_at=now)
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE feedback_feedbackrecord fr SET correction_rule_id = r.id FROM feedback_correctionrule r "
                "WHERE r.pattern_id = fr.pattern_id AND r.id = ANY(%s) AND fr.correction_rule_id IS NULL",
                [[r.pk for r in rules]],
            )
    logger.info("created %s correction rule(s)", len(rules))
    return rules


def _rule_locked(rule) -> CorrectionRule:
    pk = rule.pk if hasattr(rule, "pk") else int(rule)
    obj = CorrectionRule.objects.select_for_update().filter(pk=pk).first()
    if obj is None:
        raise NotFound(f"Correction rule {pk} not found.", field="id")
    return obj


APPROVE_PERMISSION = "feedback.approve_correctionrule"


def correction_rule_approve(*, rule, user) -> CorrectionRule:
    """Activate a pending rule: only a human with the permission, never an agent's key. A rule past its expiry is
    refused (409 ``rule_expired``) even before the cycle marks it expired: approved, it would never be in force."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.has_perm(APPROVE_PERMISSION):
        raise Forbidden(f"Only a reviewer with the permission {APPROVE_PERMISSION} approves correction rules.", field="user")
    with transaction.atomic():
        obj = _rule_locked(rule)
        if obj.status != CorrectionRuleStatus.PENDING:
            raise Conflict(
                f"Rule {obj.pk} is {obj.status}; only pending rules can be approved.",
                field="status",
                extra={"current_status": obj.status},
            )
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            raise Conflict(
                f"Rule {obj.pk} expired at {obj.expires_at:%Y-%m-%d %H:%M} UTC before it was approved; if the mistake "
                "recurs, the next autonomy cycle proposes a new rule.",
                field="expires_at",
                code="rule_expired",
                extra={"current_status": obj.status},
            )
        obj.status, obj.approved_by, obj.approved_at = CorrectionRuleStatus.ACTIVE, user, timezone.now()
        obj._history_user = user
        obj.save(update_fields=["status", "approved_by", "approved_at"])
    return obj


def correction_rule_deactivate(*, rule, user=None, reason: str = "", must_be_active: bool = False) -> CorrectionRule:
    """Stop a rule (pending or active; ``must_be_active``: only one in force, as a revert undoes what applied); its
    history keeps who and why."""
    with transaction.atomic():
        obj = _rule_locked(rule)
        if obj.status in (CorrectionRuleStatus.INACTIVE, CorrectionRuleStatus.EXPIRED):
            raise Conflict(f"Rule {obj.pk} is already {obj.status}.", field="status", extra={"current_status": obj.status})
        if must_be_active and obj.status != CorrectionRuleStatus.ACTIVE:
            raise Conflict(
                f"Rule {obj.pk} is {obj.status}: it never applied, so there is nothing to revert; decide it in the review inbox.",
                field="status",
                extra={"current_status": obj.status},
            )
        obj.status, obj.deactivated_by, obj.deactivated_at = CorrectionRuleStatus.INACTIVE, user, timezone.now()
        obj._history_user = user
        if reason:
            obj._change_reason = f"reverted: {reason}"[:100]
        obj.save(update_fields=["status", "deactivated_by", "deactivated_at"])
    return obj


def correction_rules_expire(*, agent_id: int | None = None) -> int:
    """Mark rules past their expiry ``expired`` (with a history row each)."""
    with transaction.atomic():
        qs = CorrectionRule.objects.select_for_update().filter(
            status__in=[CorrectionRuleStatus.ACTIVE, CorrectionRuleStatus.PENDING], expires_at__lte=timezone.now()
        )
        if agent_id is not None:
            qs = qs.filter(agent_id=agent_id)
        n = 0
        for rule in qs:
            rule.status = CorrectionRuleStatus.EXPIRED
            rule._change_reason = "expired"
            rule.save(update_fields=["status"])
            n += 1
    return n
