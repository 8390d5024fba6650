"""A correction rule that expired is renewed when its mistake recurs after the expiry: the pattern becomes active
again and a new rule is drawn from it, the old rule kept as history. A rule a reviewer deactivated is a human
decision: a recurrence does not replace it; only a reviewer reopening the pattern does."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings
from django.utils import timezone

from agents.models import Agent
from autonomy.selectors import action_consult
from autonomy.services import autonomy_cycle_run, autonomy_cycles_run
from common.api import Conflict
from feedback.models import CorrectionRule, FeedbackRecord, MistakePattern
from feedback.services.agent_sets import correction_rules_create_for_agents, mistake_patterns_detect_for_agents
from feedback.services.mistakes import mistake_pattern_set_status, mistake_patterns_detect
from feedback.services.rules import (
    correction_rule_approve,
    correction_rule_deactivate,
    correction_rules_create,
    correction_rules_expire,
)
from tests.conftest import reject_n, reviewer_user

pytestmark = pytest.mark.django_db


def expire(rule, at=None) -> None:
    """The rule's expiry passes (at ``at``, or just now) and the expiry job marks it expired."""
    CorrectionRule.objects.filter(pk=rule.pk).update(expires_at=at or timezone.now())
    assert correction_rules_expire() == 1
    rule.refresh_from_db()
    assert rule.status == "expired"


def consult(agent) -> dict:
    return action_consult(agent=agent, action_name="email.send", confidence=0.8)


def test_a_mistake_recurring_after_its_rule_expired_gets_a_new_rule(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (first,) = correction_rules_create()
    pattern = MistakePattern.objects.get()
    expire(first)
    # an expiry alone reopens nothing: no recurrence, no new rule
    mistake_patterns_detect()
    assert correction_rules_create() == []
    pattern.refresh_from_db()
    assert pattern.status == "mitigated"

    reject_n(agent, 5)
    detection = mistake_patterns_detect()
    assert detection.updated == [pattern.pk]
    pattern.refresh_from_db()
    assert (pattern.status, pattern.occurrence_count) == ("active", 8)
    seen = consult(agent)
    assert [p["id"] for p in seen["patterns"]] == [pattern.pk] and seen["rules"] == []  # warned while no rule is in force

    (second,) = correction_rules_create()
    assert second.pk != first.pk and second.pattern_id == pattern.pk and second.status == "active"
    assert "8 times" in second.precondition
    pattern.refresh_from_db()
    first.refresh_from_db()
    assert pattern.status == "mitigated"
    assert first.status == "expired" and first.pattern_id == pattern.pk  # the old rule stays, as history
    assert list(first.history.values_list("status", flat=True)) == ["expired", "active"]
    assert list(pattern.correction_rules.order_by("id").values_list("status", flat=True)) == ["expired", "active"]
    # the records the old rule was drawn from keep it; the recurrence is linked to the new one
    assert FeedbackRecord.objects.filter(correction_rule=first).count() == 3
    assert FeedbackRecord.objects.filter(correction_rule=second).count() == 5
    seen = consult(agent)
    assert [r["id"] for r in seen["rules"]] == [second.pk] and seen["patterns"] == []
    assert correction_rules_create() == []  # one rule pending or in force per pattern


def test_only_a_recurrence_after_the_expiry_renews_the_rule(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (first,) = correction_rules_create()
    reject_n(agent, 2)  # the mistake recurs while the rule is in force: the rule stands, no second one
    mistake_patterns_detect()
    assert correction_rules_create() == []
    pattern = MistakePattern.objects.get()
    assert (pattern.status, pattern.occurrence_count) == ("mitigated", 5)

    expire(first, at=timezone.now())  # expires after every mistake so far
    mistake_patterns_detect()
    pattern.refresh_from_db()
    assert pattern.status == "mitigated" and correction_rules_create() == []

    reject_n(agent, 1)  # one recurrence after the expiry
    mistake_patterns_detect()
    pattern.refresh_from_db()
    assert (pattern.status, pattern.occurrence_count) == ("active", 6)
    (second,) = correction_rules_create()
    assert second.pattern_id == pattern.pk
    assert FeedbackRecord.objects.filter(correction_rule=first).count() == 3
    assert FeedbackRecord.objects.filter(correction_rule=second).count() == 3  # the two seen under the rule and the new one


def test_a_rule_a_reviewer_deactivated_is_not_replaced_by_a_recurrence(agent):
    reviewer = reviewer_user("rita", "approve_correctionrule", "change_mistakepattern")
    reject_n(agent, 3)
    mistake_patterns_detect()
    (first,) = correction_rules_create()
    correction_rule_deactivate(rule=first, user=reviewer, reason="the advice is wrong")
    CorrectionRule.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(days=1))
    assert correction_rules_expire() == 0  # a deactivated rule never turns into an expired one

    reject_n(agent, 5)
    mistake_patterns_detect()
    pattern = MistakePattern.objects.get()
    assert (pattern.status, pattern.occurrence_count) == ("mitigated", 8)
    assert correction_rules_create() == []
    first.refresh_from_db()
    assert first.status == "inactive" and first.deactivated_by == reviewer
    assert CorrectionRule.objects.count() == 1
    seen = consult(agent)
    assert seen["rules"] == [] and seen["patterns"] == []

    # the reviewer, and only a reviewer, reopens the pattern: then a new rule is drawn from it
    mistake_pattern_set_status(pattern=pattern, status="active", notes="it keeps happening", user=reviewer)
    assert [p["id"] for p in consult(agent)["patterns"]] == [pattern.pk]
    (second,) = correction_rules_create()
    assert second.pattern_id == pattern.pk and second.status == "active"
    first.refresh_from_db()
    assert first.status == "inactive"
    assert list(pattern.correction_rules.order_by("id").values_list("status", flat=True)) == ["inactive", "active"]


@override_settings(CORRECTION_RULES_REQUIRE_APPROVAL=True)
def test_a_pending_rule_that_expired_unapproved_is_proposed_again_on_recurrence(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (first,) = correction_rules_create()
    assert first.status == "pending_approval"
    expire(first)
    reject_n(agent, 3)
    mistake_patterns_detect()
    (second,) = correction_rules_create()
    assert second.status == "pending_approval" and second.pattern_id == first.pattern_id
    correction_rule_approve(rule=second, user=reviewer_user("rita", "approve_correctionrule"))
    assert [r["id"] for r in consult(agent)["rules"]] == [second.pk]


def test_the_set_based_steps_renew_an_expired_rule(agent):
    other = Agent.objects.create(name="other")
    for a in (agent, other):
        reject_n(a, 3)
    mistake_patterns_detect_for_agents(agent_ids=[agent.pk, other.pk])
    rules = correction_rules_create_for_agents(agent_ids=[agent.pk, other.pk])
    (first,) = rules[agent.pk]
    expire(first)
    reject_n(agent, 5)
    reject_n(other, 5)  # the other agent's rule is still in force: nothing renewed for it
    detected = mistake_patterns_detect_for_agents(agent_ids=[agent.pk, other.pk])
    assert set(detected) == {agent.pk, other.pk}
    renewed = correction_rules_create_for_agents(agent_ids=[agent.pk, other.pk])
    assert list(renewed) == [agent.pk]
    (second,) = renewed[agent.pk]
    assert second.pattern_id == first.pattern_id and second.pk != first.pk
    assert MistakePattern.objects.get(agent=other).status == "mitigated"


@pytest.mark.parametrize("cycle", ["per_agent", "set_based"])
def test_autonomy_cycles_renew_an_expired_rule(agent, cycle):
    def run():
        if cycle == "per_agent":
            assert autonomy_cycle_run(agent_id=agent.pk) is not None
        else:
            assert autonomy_cycles_run(agent_ids=[agent.pk]).episodes

    reject_n(agent, 3)
    run()
    (first,) = CorrectionRule.objects.all()
    CorrectionRule.objects.filter(pk=first.pk).update(expires_at=timezone.now())
    run()  # the cycle's expiry step marks it expired
    first.refresh_from_db()
    assert first.status == "expired"
    reject_n(agent, 5)
    run()
    second = CorrectionRule.objects.exclude(pk=first.pk).get()
    assert second.status == "active" and second.pattern_id == first.pattern_id
    assert MistakePattern.objects.get().status == "mitigated"


@pytest.mark.parametrize("cycle", ["per_agent", "set_based"])
def test_one_cycle_renews_a_rule_whose_expiry_passed_before_anything_marked_it(agent, cycle):
    reject_n(agent, 3)
    autonomy_cycle_run(agent_id=agent.pk)
    (first,) = CorrectionRule.objects.all()
    CorrectionRule.objects.filter(pk=first.pk).update(expires_at=timezone.now())  # past, still "active"
    reject_n(agent, 5)  # the mistake recurs after the expiry
    if cycle == "per_agent":
        autonomy_cycle_run(agent_id=agent.pk)
    else:
        autonomy_cycles_run(agent_ids=[agent.pk])
    first.refresh_from_db()
    assert first.status == "expired"
    second = CorrectionRule.objects.exclude(pk=first.pk).get()  # in the same cycle, not the next one
    assert second.status == "active" and second.pattern_id == first.pattern_id
    assert MistakePattern.objects.get().status == "mitigated"


def test_a_pattern_never_has_two_rules_pending_or_in_force(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (rule,) = correction_rules_create()
    with pytest.raises(IntegrityError), transaction.atomic():
        CorrectionRule.objects.create(
            agent=agent, action=rule.action, pattern=rule.pattern, precondition="again", correction={}, status="pending_approval"
        )


@override_settings(CORRECTION_RULES_REQUIRE_APPROVAL=True)
def test_a_pending_rule_past_its_expiry_is_not_approved():
    """Approved, it would be reported active and never be in force (consult reads rules within their expiry)."""
    agent = Agent.objects.create(name="ops")
    reject_n(agent, 3)
    mistake_patterns_detect(agent_id=agent.pk)
    (rule,) = correction_rules_create(agent_id=agent.pk)
    CorrectionRule.objects.filter(pk=rule.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    with pytest.raises(Conflict) as refused:
        correction_rule_approve(rule=rule.pk, user=reviewer_user("rev", "approve_correctionrule"))
    assert refused.value.code == "rule_expired" and refused.value.field == "expires_at"
    rule.refresh_from_db()
    assert rule.status == "pending_approval" and rule.approved_by is None


@override_settings(CORRECTION_RULES_REQUIRE_APPROVAL=True)
def test_a_rule_waiting_for_a_reviewer_leaves_the_pattern_warning_the_agent():
    """No rule is in force until a reviewer approves the drafted one: consult still reports the pattern and its penalty
    meanwhile, and only the approved rule takes over."""
    agent = Agent.objects.create(name="ops")
    reject_n(agent, 3)
    mistake_patterns_detect()
    before = action_consult(agent=agent, action_name="email.send", confidence=0.8)
    assert len(before["patterns"]) == 1 and before["pattern_penalty"] < 0
    (rule,) = correction_rules_create()
    assert rule.status == "pending_approval" and MistakePattern.objects.get().status == "mitigated"
    waiting = action_consult(agent=agent, action_name="email.send", confidence=0.8)
    assert waiting["rules"] == [] and len(waiting["patterns"]) == 1
    assert waiting["adjusted_confidence"] == before["adjusted_confidence"]
    correction_rule_approve(rule=rule, user=reviewer_user("rev", "approve_correctionrule"))
    approved = action_consult(agent=agent, action_name="email.send", confidence=0.8)
    assert len(approved["rules"]) == 1 and approved["patterns"] == []
