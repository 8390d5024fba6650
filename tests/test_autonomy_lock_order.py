"""An approval of an autonomy transition and an emergency stop (or a revert) of the same action at the same time:
each on its own connection, each paused right after its first row lock until the other holds its own first lock or
waits for one. With one lock order (the action row, then its transitions) neither deadlocks: the second waits for
the first and then sees what it did. Locked in the other order they would wait on each other in a cycle, and
PostgreSQL would abort one with "deadlock detected"."""

import threading
import time

import pytest
from django.db import connection, transaction

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition
from autonomy.services import action_autonomy_revert, action_autonomy_stop, autonomy_evaluate, autonomy_transition_approve
from common.api import Conflict
from tests.conftest import fill_history, reviewer_user

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT_S = 30


class _Racer:
    """A service call in its own thread and connection that pauses after its first ``SELECT … FOR UPDATE``."""

    def __init__(self, fn):
        self.fn = fn
        self.pid = None
        self.started = threading.Event()
        self.locked = threading.Event()
        self.go = threading.Event()
        self.outcome = None
        self.error = None
        self.thread = threading.Thread(target=self._run)

    def _pause_after_first_lock(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "FOR UPDATE" in sql and not self.locked.is_set():
            self.locked.set()
            self.go.wait(TIMEOUT_S)
        return result

    def _run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.started.set()
            with connection.execute_wrapper(self._pause_after_first_lock):
                self.outcome = self.fn()
        except Conflict as exc:  # a refusal the service answers (409), not a failure
            self.outcome = exc.code
        except Exception as exc:  # a deadlock, or anything else: reported by the assertions
            self.error = exc
        finally:
            self.started.set()
            self.locked.set()
            connection.close()

    def start(self):
        self.thread.start()
        assert self.started.wait(TIMEOUT_S)

    def holds_or_waits_for_a_lock(self) -> bool:
        if self.locked.is_set():
            return True
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [self.pid])
            row = cursor.fetchone()
        return bool(row and row[0])


def race(first: _Racer, second: _Racer) -> None:
    """``first`` takes its first lock, then ``second`` takes its own or blocks on one; then both go on."""
    first.start()
    assert first.locked.wait(TIMEOUT_S)
    second.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not second.holds_or_waits_for_a_lock():
        assert time.monotonic() < deadline, "the second call neither locked nor waited for a lock"
        time.sleep(0.01)
    first.go.set()
    second.go.set()
    for racer in (first, second):
        racer.thread.join(TIMEOUT_S)
        assert not racer.thread.is_alive()


def _proposed_promotion(level: int) -> tuple[Action, AutonomyTransition]:
    agent = Agent.objects.get_or_create(name="ops")[0]
    send = Action.objects.get_or_create(name="email.send", defaults={"autonomy_level": level})[0]
    if not send.proposals.exists():
        fill_history(send, agent, completed=25)  # 25 samples, all successful: a promotion is proposed
    (proposed,) = autonomy_evaluate(action_ids=[send.pk], force=True)["proposed"]
    assert (proposed.from_level, proposed.to_level) == (level, level + 1)
    return send, proposed


@pytest.mark.parametrize("first", ["approve", "stop"])
def test_approval_and_emergency_stop_of_one_action_at_once_never_deadlock(first):
    send, proposed = _proposed_promotion(2)
    approver = reviewer_user("rita", "approve_autonomytransition")
    stopper = reviewer_user("sam", "approve_autonomytransition")
    approve = _Racer(lambda: autonomy_transition_approve(transition=proposed.pk, user=approver) and "applied")
    stop = _Racer(lambda: action_autonomy_stop(action=send.pk, user=stopper, reason="sent to the wrong people") and "stopped")
    if first == "approve":
        race(approve, stop)
    else:
        race(stop, approve)

    assert (approve.error, stop.error) == (None, None)  # no "deadlock detected", no error of any kind
    assert stop.outcome == "stopped"  # the emergency stop always applies
    proposed.refresh_from_db()
    send.refresh_from_db()
    assert send.autonomy_level == 1  # and it has the last word: the action ends at level 1 either way
    (stop_row,) = AutonomyTransition.objects.filter(action=send, evidence__emergency_stop=True)
    assert stop_row.status == "applied" and stop_row.to_level == 1
    if first == "approve":  # the approval applied 2 → 3, then the stop 3 → 1
        assert approve.outcome == "applied" and proposed.status == "applied" and proposed.decided_by == approver
        assert stop_row.from_level == 3
        assert list(send.history.order_by("history_id").values_list("autonomy_level", flat=True))[-2:] == [3, 1]
    else:  # the stop 2 → 1 superseded the proposal: the approval then finds it decided (409), nothing applied
        assert approve.outcome == "invalid_transition" and proposed.status == "rejected"
        assert proposed.decision_notes.startswith("superseded by emergency stop")
        assert stop_row.from_level == 2
        assert list(send.history.order_by("history_id").values_list("autonomy_level", flat=True))[-2:] == [2, 1]
    assert not AutonomyTransition.objects.filter(action=send, status="proposed").exists()


def test_approval_and_revert_of_one_action_at_once_never_deadlock():
    reviewer = reviewer_user("rita", "approve_autonomytransition")
    send, promotion = _proposed_promotion(1)
    autonomy_transition_approve(transition=promotion.pk, user=reviewer)  # 1 → 2, the change to revert
    send, proposed = _proposed_promotion(2)  # and 2 → 3 waits for a decision
    revert = _Racer(
        lambda: action_autonomy_revert(action=send.pk, user=reviewer, reason="too soon", revert_of=promotion.pk) and "reverted"
    )
    approve = _Racer(lambda: autonomy_transition_approve(transition=proposed.pk, user=reviewer) and "applied")
    race(revert, approve)

    assert (revert.error, approve.error) == (None, None)
    assert (revert.outcome, approve.outcome) == ("reverted", "invalid_transition")
    send.refresh_from_db()
    proposed.refresh_from_db()
    assert send.autonomy_level == 1 and proposed.status == "rejected"
    assert proposed.decision_notes.startswith("superseded by revert")


def test_a_bulk_decision_over_many_transitions_and_an_emergency_stop_never_deadlock(monkeypatch):
    """Past ``ADMIN_LOCKS_MAX`` items an admin bulk decision locks the rows themselves before deciding: the actions
    first, then their transitions, as the decision and the stop do."""
    from review import services as review_services

    monkeypatch.setattr(review_services, "ADMIN_LOCKS_MAX", 0)  # any selection takes the row-lock path
    send, proposed = _proposed_promotion(2)
    approver = reviewer_user("rita", "approve_autonomytransition")
    stopper = reviewer_user("sam", "approve_autonomytransition")

    def bulk_approve():
        with transaction.atomic():  # as the admin's bulk action: hold the selection, then decide each item
            assert review_services.items_hold_for_admin(kind="transition", ids=[proposed.pk], user=approver) == []
            return autonomy_transition_approve(transition=proposed.pk, user=approver) and "applied"

    bulk = _Racer(bulk_approve)
    stop = _Racer(lambda: action_autonomy_stop(action=send.pk, user=stopper, reason="wrong people") and "stopped")
    race(bulk, stop)

    assert (bulk.error, stop.error) == (None, None)
    assert (bulk.outcome, stop.outcome) == ("applied", "stopped")
    send.refresh_from_db()
    assert send.autonomy_level == 1
    assert list(send.history.order_by("history_id").values_list("autonomy_level", flat=True))[-2:] == [3, 1]
