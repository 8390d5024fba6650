"""Feedback records in the same transaction on every path, repeated-mistake patterns, correction rules."""

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from actions.models import Action, AutonomyLevel
from agents.models import Agent
from common.api import ApplicationError
from feedback.models import CorrectionRule, Execution, FeedbackRecord, MistakePattern, Proposal
from feedback.services import reviews as svc
from feedback.services.mistakes import mistake_pattern_set_status, mistake_patterns_detect
from feedback.services.reviews import (
    execution_create,
    execution_review,
    manual_override_record,
    proposal_approve,
    proposal_modify,
    proposal_outcome_record,
    proposal_reject,
)
from feedback.services.rules import (
    correction_rule_approve,
    correction_rule_deactivate,
    correction_rules_create,
    correction_rules_expire,
)
from tests.conftest import REVIEWER, make_proposal, reject_n, reviewer_user

pytestmark = pytest.mark.django_db


def execution(agent, action="email.send"):
    Action.objects.get_or_create(name=action, defaults={"autonomy_level": AutonomyLevel.ACT_REVIEWED})
    return execution_create(agent=agent, action=action, params={"to": "x"}, reasoning={"confidence": 0.8}, success=True)


class Rollback(Exception):
    pass


PATHS = {
    "reject": lambda a: proposal_reject(proposal=make_proposal(a), reviewer=REVIEWER, notes="no"),
    "modify": lambda a: proposal_modify(proposal=make_proposal(a), reviewer=REVIEWER, modified_action={"to": "cfo@example.com"}),
    "review_incorrect": lambda a: execution_review(execution=execution(a), reviewer=REVIEWER, outcome="incorrect"),
    "review_correct": lambda a: execution_review(execution=execution(a), reviewer=REVIEWER, outcome="correct"),
    "outcome_failure": lambda a: proposal_outcome_record(
        agent=a, proposal_id=proposal_approve(proposal=make_proposal(a), reviewer=REVIEWER).pk, success=False, error="bounced"
    ),
    "manual_override": lambda a: (
        Action.objects.get_or_create(name="email.send"),
        manual_override_record(agent=a, action="email.send", original_action={"to": "a"}, corrected_action={"to": "b"}),
    )[1],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_feedback_path_writes_exactly_one_record_in_the_same_transaction(agent, path):
    PATHS[path](agent)
    assert FeedbackRecord.objects.count() == 1
    FeedbackRecord.objects.all().delete()
    Proposal.objects.all().delete()
    Execution.objects.all().delete()
    # roll the change back from the outside: the record is gone with it
    with pytest.raises(Rollback), transaction.atomic():
        PATHS[path](agent)
        assert FeedbackRecord.objects.count() == 1
        raise Rollback
    assert FeedbackRecord.objects.count() == 0
    assert not Proposal.objects.exclude(status="pending").exists() and not Execution.objects.exclude(review_outcome=None).exists()


def test_a_failing_record_write_rolls_back_the_status_change(agent, monkeypatch):
    p = make_proposal(agent)

    def boom(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(svc, "_feedback_create", boom)
    with pytest.raises(RuntimeError):
        proposal_reject(proposal=p, reviewer=REVIEWER, notes="no")
    p.refresh_from_db()
    assert p.status == "pending"


def test_command_path_writes_the_record(agent):
    p = make_proposal(agent)
    stdout = StringIO()
    call_command(
        "review_proposal", str(p.pk), "modify", "--modified-action", '{"to": "cfo@example.com"}', "--notes", "cfo", stdout=stdout
    )
    rec = FeedbackRecord.objects.get()
    assert rec.source == "command" and rec.feedback_type == "correction" and "modified" in stdout.getvalue()


def test_three_rejections_make_a_pattern_and_a_fourth_updates_it(agent):
    reject_n(agent, 2)
    assert mistake_patterns_detect().created == []
    reject_n(agent, 1)
    make_proposal(agent, action="email.send")  # pending ones are not mistakes
    r = mistake_patterns_detect()
    assert len(r.created) == 1 and r.linked_records == 3
    p = MistakePattern.objects.get()
    assert (p.category, p.occurrence_count, p.status) == ("rejection", 3, "active")
    assert "never email the CEO" in p.description and p.common_explanation == "never email the CEO"
    assert set(p.records.values_list("pk", flat=True)) == set(FeedbackRecord.objects.values_list("pk", flat=True))
    assert FeedbackRecord.objects.filter(processed=True).count() == 3
    first_seen = p.first_seen
    assert mistake_patterns_detect().pattern_ids == []  # nothing changed: no update
    reject_n(agent, 1, notes="wrong person")
    r = mistake_patterns_detect()
    assert r.created == [] and r.updated == [p.pk]
    p.refresh_from_db()
    assert p.occurrence_count == 4 and p.first_seen == first_seen and p.records.count() == 4
    assert MistakePattern.objects.count() == 1


def test_grouping_by_category_then_type_and_window(agent):
    reject_n(agent, 3, category="tone")
    reject_n(agent, 3, corrected={"to": "cfo@example.com"})
    old = FeedbackRecord.objects.filter(mistake_category="tone")
    old.update(created_at=timezone.now() - timedelta(days=40))
    mistake_patterns_detect(window_days=30)
    assert list(MistakePattern.objects.values_list("category", flat=True)) == ["correction"]
    mistake_patterns_detect(window_days=60)
    assert sorted(MistakePattern.objects.values_list("category", flat=True)) == ["correction", "tone"]
    assert MistakePattern.objects.get(category="correction").common_correction == {"to": "cfo@example.com"}
    with pytest.raises(ApplicationError):
        mistake_patterns_detect(window_days=0)
    with pytest.raises(ApplicationError):
        mistake_patterns_detect(window_days=-3)
    # records older than the retention move to the archive: a window reaching them cannot count them
    with pytest.raises(ApplicationError, match="shorter than the feedback records' retention") as refused:
        mistake_patterns_detect(window_days=settings.FEEDBACK_RECORD_RETENTION_DAYS)
    assert refused.value.field == "window_days"


def test_resolved_pattern_reopens_on_new_mistakes_dismissed_stays(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    p = MistakePattern.objects.get()
    mistake_pattern_set_status(pattern=p, status="resolved", notes="fixed the prompt")
    reject_n(agent, 1)
    mistake_patterns_detect()
    p.refresh_from_db()
    assert p.status == "active" and p.occurrence_count == 4
    mistake_pattern_set_status(pattern=p, status="dismissed", notes="not a mistake")
    reject_n(agent, 1)
    mistake_patterns_detect()
    p.refresh_from_db()
    assert p.status == "dismissed" and p.occurrence_count == 5


def test_detect_mistakes_command(agent):
    reject_n(agent, 3)
    stdout = StringIO()
    call_command("detect_mistakes", "--agent", agent.name, "--window-days", "30", "--min", "3", stdout=stdout)
    assert "1 new pattern" in stdout.getvalue()
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("detect_mistakes", "--window-days", "0")
    with pytest.raises(CommandError):
        call_command("detect_mistakes", "--agent", "nobody")
    with pytest.raises(CommandError, match="FEEDBACK_RECORD_RETENTION_DAYS"):
        call_command("detect_mistakes", "--window-days", "400")


@pytest.mark.django_db(transaction=True)
def test_concurrent_detection_runs_do_not_duplicate():
    agents = [Agent.objects.create(name=f"a{i}") for i in range(3)]
    for a in agents:
        reject_n(a, 4)
        reject_n(a, 3, action="crm.update")
    barrier = threading.Barrier(4)
    errors = []

    def run(agent_id):
        try:
            barrier.wait()
            mistake_patterns_detect(agent_id=agent_id)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(x,)) for x in (None, None, agents[0].pk, agents[1].pk)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert MistakePattern.objects.count() == 6
    assert FeedbackRecord.objects.filter(pattern__isnull=True).count() == 0


def test_rules_from_patterns(agent):
    reject_n(agent, 3, corrected={"to": "cfo@example.com"}, notes="send it to the CFO")
    reject_n(agent, 3, action="crm.update", notes="")
    mistake_patterns_detect()
    rules = correction_rules_create(agent_id=agent.pk)
    assert len(rules) == 2
    email = CorrectionRule.objects.get(action__name="email.send")
    assert email.correction == {"to": "cfo@example.com"} and not email.require_review and email.status == "active"
    assert "send it to the CFO" in email.precondition and "(3×)" in email.precondition
    assert abs((email.expires_at - timezone.now()) - timedelta(days=90)) < timedelta(minutes=1)
    crm = CorrectionRule.objects.get(action__name="crm.update")
    assert crm.correction == {"require_review": True} and crm.require_review
    assert set(MistakePattern.objects.values_list("status", flat=True)) == {"mitigated"}
    assert FeedbackRecord.objects.filter(correction_rule=email).count() == 3
    assert correction_rules_create(agent_id=agent.pk) == []  # one rule per pattern
    correction_rule_deactivate(rule=email)
    email.refresh_from_db()
    assert email.status == "inactive" and email.history.count() == 2
    with pytest.raises(ApplicationError):
        correction_rule_deactivate(rule=email)


@override_settings(CORRECTION_RULES_REQUIRE_APPROVAL=True, CORRECTION_RULE_EXPIRY_DAYS=7)
def test_rule_approval_setting_and_expiry(agent):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (rule,) = correction_rules_create()
    assert rule.status == "pending_approval"
    assert abs((rule.expires_at - timezone.now()) - timedelta(days=7)) < timedelta(minutes=1)
    with pytest.raises(ApplicationError, match="permission"):
        correction_rule_approve(rule=rule, user=reviewer_user("sam", "view_correctionrule"))
    with pytest.raises(ApplicationError, match="permission"):
        correction_rule_approve(rule=rule, user=None)  # never without a human
    rita = reviewer_user("rita", "approve_correctionrule")
    correction_rule_approve(rule=rule, user=rita)
    rule.refresh_from_db()
    assert rule.status == "active" and rule.approved_at is not None and rule.approved_by == rita
    with pytest.raises(ApplicationError):
        correction_rule_approve(rule=rule, user=rita)
    CorrectionRule.objects.filter(pk=rule.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert correction_rules_expire() == 1
    rule.refresh_from_db()
    assert rule.status == "expired"
    assert list(rule.history.values_list("status", flat=True)) == ["expired", "active", "pending_approval"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_rejections_write_one_record():
    agent = Agent.objects.create(name="racer")
    p = make_proposal(agent)
    barrier = threading.Barrier(2)
    outcomes = []

    def reject():
        try:
            barrier.wait()
            proposal_reject(proposal=p.pk, reviewer=REVIEWER, notes="no")
            outcomes.append("rejected")
        except ApplicationError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=reject) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["invalid_transition", "rejected"]
    assert FeedbackRecord.objects.filter(proposal=p).count() == 1
