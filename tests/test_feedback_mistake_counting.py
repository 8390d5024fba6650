"""A pattern counts mistakes, not records, under one spelling of their category; a rule drawn while a detection runs
is seen by it; a pattern whose rule is gone is warned about again when the mistake recurs."""

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.utils import timezone

from agents.models import Agent
from feedback.models import CorrectionRule, FeedbackRecord, MistakePattern
from feedback.services.mistakes import mistake_patterns_detect
from feedback.services.reviews import manual_override_record, proposal_reject
from feedback.services.rules import correction_rules_create, correction_rules_expire
from tests.conftest import REVIEWER, make_client, make_proposal, reject_n

pytestmark = pytest.mark.django_db

OVERRIDE = {
    "action": "email.send",
    "original_action": {"to": "ceo@example.com"},
    "corrected_action": {"to": "cfo@example.com"},
    "explanation": "send it to the CFO",
    "mistake_category": "wrong_target",
}


def test_one_proposal_overridden_three_times_is_one_mistake_not_a_pattern():
    api = make_client(["resolve", "feedback"], name="mailer")
    proposal = make_proposal(api.agent, to="ceo@example.com")
    for _ in range(3):  # a client retrying without an idempotency key
        assert api.post("/api/v1/overrides", {**OVERRIDE, "proposal": proposal.pk}, format="json").status_code == 201
    assert mistake_patterns_detect().created == [] and not MistakePattern.objects.exists()
    for _ in range(2):  # two more proposals with the same mistake: three in all
        other = make_proposal(api.agent, to="ceo@example.com")
        assert api.post("/api/v1/overrides", {**OVERRIDE, "proposal": other.pk}, format="json").status_code == 201
    mistake_patterns_detect()
    pattern = MistakePattern.objects.get()
    assert pattern.occurrence_count == 3 and pattern.description.startswith("3 × wrong_target")
    (rule,) = correction_rules_create()
    assert "made this mistake 3 times" in rule.precondition and "Feedback said" in rule.precondition


def test_a_proposal_rejected_and_also_overridden_counts_once(agent):
    for _ in range(2):
        p = make_proposal(agent)
        proposal_reject(proposal=p, reviewer=REVIEWER, notes="wrong recipient", mistake_category="wrong_target")
        manual_override_record(agent=agent, **{**OVERRIDE, "explanation": ""}, proposal_id=p.pk)
    assert FeedbackRecord.objects.count() == 4
    mistake_patterns_detect()
    assert not MistakePattern.objects.exists()  # two mistakes, below the three a pattern needs


@pytest.mark.parametrize(
    "variant", ["Wrong_Target", "WRONG_TARGET", "\N{FULLWIDTH LATIN SMALL LETTER W}rong_target", " wrong_target "]
)
def test_one_category_however_it_is_spelled(agent, variant):
    reject_n(agent, 2, category="wrong_target")
    reject_n(agent, 1, category=variant)
    assert set(FeedbackRecord.objects.values_list("mistake_category", flat=True)) == {"wrong_target"}
    mistake_patterns_detect()
    assert list(MistakePattern.objects.values_list("category", "occurrence_count")) == [("wrong_target", 3)]


def test_categories_stored_before_are_normalised_and_a_taken_one_is_kept(agent):
    import importlib

    reject_n(agent, 3, category="wrong_target")
    mistake_patterns_detect()
    reject_n(agent, 3, category="other")
    mistake_patterns_detect()
    FeedbackRecord.objects.filter(mistake_category="other").update(mistake_category="Wrong_Target")
    MistakePattern.objects.filter(category="other").update(category="Wrong_Target")  # taken once normalised
    reject_n(agent, 1, category="x")
    FeedbackRecord.objects.filter(mistake_category="x").update(mistake_category="OTHER Thing")
    migration = importlib.import_module("feedback.migrations.0006_mistake_categories_normalized")
    migration.categories_normalized(django_apps, SimpleNamespace(connection=connection))
    categories = set(FeedbackRecord.objects.values_list("mistake_category", flat=True))
    assert categories == {"wrong_target", "other thing"}
    assert sorted(MistakePattern.objects.values_list("category", flat=True)) == ["Wrong_Target", "wrong_target"]
    kept, twin = MistakePattern.objects.get(category="Wrong_Target"), MistakePattern.objects.get(category="wrong_target")
    assert kept.status == "resolved" and f"pattern {twin.pk}" in kept.resolution_notes
    mistake_patterns_detect()
    assert MistakePattern.objects.get(category="wrong_target").occurrence_count == 6


def test_a_pattern_whose_rule_is_gone_is_reopened_when_the_mistake_recurs_and_the_admin_never_deletes_rules(agent, client):
    reject_n(agent, 3)
    mistake_patterns_detect()
    (rule,) = correction_rules_create()
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw-1234-xyz"))
    assert client.post(f"/admin/feedback/correctionrule/{rule.pk}/delete/", {"post": "yes"}).status_code == 403
    CorrectionRule.objects.filter(pk=rule.pk).delete()  # gone another way (a shell, a cascade)
    mistake_patterns_detect()
    assert MistakePattern.objects.get().status == "mitigated"  # nothing new: nothing reopens
    reject_n(agent, 1)
    mistake_patterns_detect()
    assert MistakePattern.objects.get().status == "active"
    assert len(correction_rules_create()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_detection_waiting_on_a_rule_being_drawn_leaves_the_pattern_mitigated():
    agent = Agent.objects.create(name="mailer")
    reject_n(agent, 3)
    mistake_patterns_detect()
    (first,) = correction_rules_create()
    CorrectionRule.objects.filter(pk=first.pk).update(expires_at=timezone.now())
    assert correction_rules_expire() == 1
    reject_n(agent, 3)  # the mistake recurs after the expiry: the pattern is active again
    mistake_patterns_detect()
    assert MistakePattern.objects.get().status == "active"
    drawn, release, errors = threading.Event(), threading.Event(), []

    def cycle():  # the autonomy cycle draws the new rule and holds its transaction open a moment
        try:
            with transaction.atomic():
                correction_rules_create(agent_id=agent.pk)
                drawn.set()
                release.wait(20)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    def detect():  # an operator's detect_mistakes at the same moment
        try:
            drawn.wait(20)
            mistake_patterns_detect()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle), threading.Thread(target=detect)]
    for t in threads:
        t.start()
    drawn.wait(20)
    with connections["default"].cursor() as cur:  # let the cycle commit once the detection waits
        for _ in range(100):
            # this database's sessions only: the server also serves the other test processes' databases, whose
            # waits would release the cycle before the detection reached its lock
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'Advisory') "
                "AND datname = current_database()"
            )
            if cur.fetchone()[0]:
                break
            time.sleep(0.05)
    release.set()
    for t in threads:
        t.join()
    assert errors == []
    assert list(CorrectionRule.objects.order_by("id").values_list("status", flat=True)) == ["expired", "active"]
    assert MistakePattern.objects.get().status == "mitigated"
    mistake_patterns_detect()
    assert MistakePattern.objects.get().status == "mitigated" and correction_rules_create() == []


def test_patterns_stored_before_get_the_types_of_their_live_and_archived_records(agent):
    import importlib

    from feedback.models import FeedbackRecordArchive
    from feedback.services.retention import feedback_records_archive

    reject_n(agent, 3, category="wrong_target")
    mistake_patterns_detect()
    FeedbackRecord.objects.filter(pk=FeedbackRecord.objects.order_by("pk").first().pk).update(
        created_at=timezone.now() - timedelta(days=settings.FEEDBACK_RECORD_RETENTION_DAYS + 1)
    )
    feedback_records_archive()
    FeedbackRecordArchive.objects.update(feedback_type="correction")  # one archived record of another type
    MistakePattern.objects.update(feedback_types=[])  # as stored before the column existed
    migration = importlib.import_module("feedback.migrations.0007_mistake_pattern_feedback_types")
    migration.types_filled(django_apps, SimpleNamespace(connection=connection))
    assert MistakePattern.objects.get().feedback_types == ["correction", "rejection"]


@pytest.mark.parametrize("set_based", [False, True])
def test_a_record_linked_without_the_pattern_counting_again_adds_its_type(agent, set_based):
    """The old mistakes left the window; one of another type and the same category arrives: it is linked to the
    pattern although the group is under the minimum, and the pattern's types take its type."""
    from feedback.selectors import mistake_pattern_list
    from feedback.services.agent_sets import mistake_patterns_detect_for_agents

    detect = (lambda: mistake_patterns_detect_for_agents(agent_ids=[agent.pk])) if set_based else mistake_patterns_detect
    reject_n(agent, 3, category="wrong_target")
    detect()
    pattern = MistakePattern.objects.get()
    assert pattern.feedback_types == ["rejection"]
    FeedbackRecord.objects.update(created_at=timezone.now() - timedelta(days=settings.MISTAKE_WINDOW_DAYS + 1))
    late = FeedbackRecord.objects.create(
        agent=agent, action=pattern.action, feedback_type="manual_override", mistake_category="wrong_target"
    )
    detect()
    late.refresh_from_db()
    pattern.refresh_from_db()
    assert late.pattern_id == pattern.pk and pattern.feedback_types == ["manual_override", "rejection"]
    assert list(mistake_pattern_list(agent=agent, filters={"feedback_type": "manual_override"})) == [pattern]
