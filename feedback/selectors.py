"""Reads for proposals, executions, feedback records, mistake patterns and correction rules."""

from django.db.models import Q
from django.utils import timezone

from common.api import NotFound
from feedback.models import CorrectionRuleStatus, Execution, FeedbackRecord, MistakePattern, Proposal


def _filter(qs, filters: dict, allowed: dict):
    for key, lookup in allowed.items():
        value = filters.get(key)
        if value not in (None, ""):
            qs = qs.filter(**{lookup: value})
    return qs


def proposal_get(*, agent, pk: int) -> Proposal:
    obj = Proposal.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise NotFound(f"Proposal {pk} not found.", field="id")
    return obj


def proposal_list(*, agent, filters: dict):
    qs = Proposal.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "status": "status"})


def execution_get(*, agent, pk: int) -> Execution:
    obj = Execution.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise NotFound(f"Execution {pk} not found.", field="id")
    return obj


def execution_list(*, agent, filters: dict):
    qs = Execution.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "status": "review_outcome"})


def feedback_record_list(*, agent, filters: dict):
    qs = FeedbackRecord.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "feedback_type": "feedback_type", "status": "pattern__status"})


def mistake_pattern_list(*, agent, filters: dict):
    qs = MistakePattern.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "feedback_type": "category", "status": "status"})


def active_rules_q() -> Q:
    return Q(status=CorrectionRuleStatus.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
