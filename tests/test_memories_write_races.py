"""Memory writes that race with an outcome, a reviewer or a purge lose nothing: an observation never merges into a
memory deprecated meanwhile, and a purge never deletes a memory promoted meanwhile. The other writer is forced into
the gap between the read and the write (a second connection)."""

import datetime
import threading

import pytest
from django.db import connection
from django.db.models.signals import pre_delete
from django.utils import timezone

import memories.services.store as store
from memories.models import Memory
from memories.services import memories_purge_deprecated, memory_feedback_apply, memory_observe, memory_promote
from tests.conftest import make_memory

BASE = (
    "Rotate the application logs with logrotate every night and keep fourteen compressed copies on the shared backup "
    "volume of the cluster so the operations team can restore them."
)
LONGER = BASE.replace("restore them.", "restore them after an incident.")


def in_other_connection(fn):
    errors = []

    def run():
        try:
            fn()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not errors, errors


def observe(text):
    return memory_observe(user_id="alice", user_message="remember this", assistant_message=text, meta={"type": "pattern"})


@pytest.mark.django_db(transaction=True)
def test_an_outcome_sent_while_an_observation_decides_waits_for_it_and_never_lands_in_between(monkeypatch):
    """A failure of the memory an observation is about to merge into, sent meanwhile, waits for the observation
    (every writer of a user's memories takes the user's scope first): it is never applied between the neighbour read
    and the merge, so nothing merges into a memory deprecated meanwhile; it deprecates the memory afterwards."""
    first = observe(BASE)
    real_decide = store.decide
    outcome = []

    def decide_then_a_failure_elsewhere(**kw):
        decision = real_decide(**kw)
        if not outcome:  # an outcome "failure" is sent between the neighbour read and the merge

            def fail():
                try:
                    memory_feedback_apply(user_id="alice", memory_ids=[first.memory_id], outcome="failure", reason="wrong")
                    outcome.append(Memory.objects.get(pk=first.memory_id).content)
                except Exception as exc:
                    outcome.append(exc)
                finally:
                    connection.close()

            outcome.append(threading.Thread(target=fail))
            outcome[0].start()
            outcome[0].join(1.0)
            assert outcome[0].is_alive()  # waiting for this observation
        return decision

    monkeypatch.setattr(store, "decide", decide_then_a_failure_elsewhere)
    second = observe(LONGER)
    outcome[0].join(20)
    assert second.decision == "merged" and second.memory_id == first.memory_id
    assert outcome[1] == Memory.objects.get(pk=first.memory_id).content  # applied after the merge, to the merged memory
    assert Memory.objects.get(pk=first.memory_id).status == "deprecated"


@pytest.mark.django_db(transaction=True)
def test_a_purge_never_deletes_a_memory_promoted_meanwhile():
    m = make_memory(content="Old deprecated lesson about the legacy build server setup.", status="deprecated")
    Memory.objects.filter(pk=m.pk).update(deprecated_at=timezone.now() - datetime.timedelta(days=120))
    promoted, threads = [], []

    def reviewer_promotes_in_between(sender, instance, **kw):
        if promoted or instance.pk != m.pk:
            return

        def run():
            try:
                promoted.append(memory_promote(memory=Memory(pk=m.pk), actor="admin:rev", reason="still right"))
            except Exception as exc:  # e.g. DoesNotExist once a fixed purge deleted it first
                promoted.append(exc)
            finally:
                connection.close()

        t = threading.Thread(target=run)
        threads.append(t)
        t.start()
        t.join(2)  # the purge holds the row: the reviewer waits for it to commit

    pre_delete.connect(reviewer_promotes_in_between, sender=Memory, weak=False)
    try:
        counts = memories_purge_deprecated(older_than=datetime.timedelta(days=90))
    finally:
        pre_delete.disconnect(reviewer_promotes_in_between, sender=Memory)
    for t in threads:
        t.join(10)
    # serialised: purged while still deprecated (the promotion then finds nothing), never a promoted row deleted
    assert counts["memories"] == 1 and not Memory.objects.filter(pk=m.pk).exists()
    assert len(promoted) == 1 and not isinstance(promoted[0], Memory), promoted
