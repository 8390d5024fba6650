"""An agent switched from private to shared user data hands its users' phrases and evidence to the shared agents."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents.authentication import verified_keys_forget
from agents.models import Agent
from common.api import Conflict
from learning.models import LearnedPhrase, PhraseEvidence
from learning.services.evidence import phrase_evidence_add
from learning.services.owners import private_phrases_share
from tenants.context import acting_agent, tenant_scope
from tenants.services import tenant_create
from tests.conftest import make_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def switches_reach_every_process_at_once(settings):
    """Here a switch of the agent's private data is seen at once (no key cache); the wait has its own tests."""
    settings.API_KEY_CACHE_S = 0


CONFIRM = "/api/v1/resolutions/confirm"
CORRECT = "/api/v1/resolutions/correct"


def _shared_and_private():
    """A shared agent and a private one, in the default tenant."""
    shared = make_client(["resolve", "feedback"], name="agent-shared")
    private = make_client(["resolve", "feedback"], name="agent-private")
    private.agent.private_user_data = True
    private.agent.save()
    verified_keys_forget()
    return shared, private


def _private_then_shared(catalogue):
    shared, private = _shared_and_private()
    for text, verb in (("units please", "cbu.list"), ("make me a unit", "cbu.create")):
        assert private.post(CONFIRM, {"text": text, "verb": verb, "user_id": "alice"}, format="json").status_code == 200
    # The shared agents taught alice "units please" another way: that text is a conflict.
    body = {"text": "units please", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"}
    assert shared.post(CORRECT, body, format="json").status_code == 200
    return shared, private


def test_a_private_agent_must_be_switched_off_first(catalogue):
    _, private = _private_then_shared(catalogue)
    with pytest.raises(CommandError, match="switch private_user_data off first"):
        call_command("share_private_phrases", "--agent", "agent-private")
    assert LearnedPhrase.objects.filter(private_agent=private.agent).count() == 2


def test_the_agents_phrases_become_shared_and_a_conflict_stays_its_own(catalogue):
    shared, private = _private_then_shared(catalogue)
    private.agent.private_user_data = False
    private.agent.save()
    verified_keys_forget()
    dry = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", "--dry-run", stdout=dry)
    assert "1 learned phrase(s) would be shared, 0 added into the same shared phrase, 1 kept" in dry.getvalue()
    assert LearnedPhrase.objects.filter(private_agent=private.agent).count() == 2

    out = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=out)
    assert "1 learned phrase(s) are shared, 0 added into the same shared phrase, 1 kept" in out.getvalue()
    assert "kept: user alice: 'units please' → cbu.list (shared: cbu.delete)" in out.getvalue()
    moved = LearnedPhrase.objects.get(normalized="make me a unit")
    assert moved.private_agent_id is None and moved.history.first().history_change_reason.startswith("shared")
    assert LearnedPhrase.objects.get(normalized="units please", private_agent__isnull=True).verb.name == "cbu.delete"
    # Evidence: "make me a unit" moved as it was; "units please"/cbu.list added into the shared row the correction left.
    assert not PhraseEvidence.objects.filter(private_agent=private.agent).exists()
    assert PhraseEvidence.objects.filter(normalized="make me a unit", verb="cbu.create", private_agent__isnull=True).exists()
    # What the agent's user taught now answers through the shared agents too.
    r = shared.post("/api/v1/resolve", {"text": "make me a unit", "user_id": "alice"}, format="json").json()
    assert (r["outcome"], r["verb"]) == ("resolved", "cbu.create")


def test_a_phrase_the_shared_agents_hold_with_the_same_verb_is_added_into_theirs_once(catalogue):
    """The same text and verb for the same user on both sides is no conflict: the shared row takes the private
    row's count and the private row goes (with its history), so a second run has nothing left to list."""
    shared, private = _shared_and_private()
    body = {"text": "units please", "verb": "cbu.list", "user_id": "alice"}
    for _ in range(2):
        assert private.post(CONFIRM, body, format="json").status_code == 200
    assert shared.post(CONFIRM, body, format="json").status_code == 200
    own = LearnedPhrase.objects.get(normalized="units please", private_agent=private.agent)
    theirs = LearnedPhrase.objects.get(normalized="units please", private_agent__isnull=True)
    assert theirs.verb.name == own.verb.name == "cbu.list"
    counts = own.occurrence_count + theirs.occurrence_count
    private.agent.private_user_data = False
    private.agent.save()
    verified_keys_forget()

    out = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=out)
    assert "0 learned phrase(s) are shared, 1 added into the same shared phrase, 0 kept" in out.getvalue()
    assert "kept:" not in out.getvalue()
    row = LearnedPhrase.objects.get(normalized="units please")  # one row left: the shared one
    assert (row.pk, row.private_agent_id, row.occurrence_count) == (theirs.pk, None, counts)
    gone = LearnedPhrase.history.filter(id=own.pk, history_type="-").get()
    assert gone.history_change_reason.startswith("added into the shared phrase")
    again = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=again)
    assert "0 learned phrase(s) are shared, 0 added into the same shared phrase, 0 kept" in again.getvalue()


def test_a_phrase_whose_shared_twin_a_reviewer_deactivated_stays_a_listed_conflict(catalogue):
    shared, private = _shared_and_private()
    body = {"text": "units please", "verb": "cbu.list", "user_id": "alice"}
    assert private.post(CONFIRM, body, format="json").status_code == 200
    assert shared.post(CONFIRM, body, format="json").status_code == 200
    LearnedPhrase.objects.filter(private_agent__isnull=True).update(is_active=False)
    private.agent.private_user_data = False
    private.agent.save()
    out = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=out)
    assert "0 added into the same shared phrase, 1 kept" in out.getvalue()
    assert LearnedPhrase.objects.filter(private_agent=private.agent, is_active=True).count() == 1


def test_the_private_switch_is_read_from_the_database_not_from_the_callers_copy(catalogue):
    """An agent switched back to private after the command loaded it: nothing moves (the row is read locked)."""
    _, private = _private_then_shared(catalogue)
    stale = Agent.objects.get(pk=private.agent.pk)
    stale.private_user_data = False  # the caller's copy; the database still says private
    with pytest.raises(Conflict, match="switch private_user_data off first"):
        private_phrases_share(agent=stale)
    assert LearnedPhrase.objects.filter(private_agent=private.agent).count() == 2


def test_an_unknown_agent_is_a_clear_error(db):
    with pytest.raises(CommandError, match="Agent nobody not found"):
        call_command("share_private_phrases", "--agent", "nobody")


def test_evidence_without_a_user_is_added_into_the_shared_row_not_a_conflict_forever(catalogue):
    """Clicks of a request without a user id leave evidence with no user: when the shared agents hold the same text
    and verb without a user too, the agent's row is added into theirs (the NULL user is the same scope)."""
    shared, private = _shared_and_private()
    with acting_agent(shared.agent):
        phrase_evidence_add(user_id=None, phrase="units please", verb="cbu.list", positive=1.0)
    with acting_agent(private.agent):
        phrase_evidence_add(user_id=None, phrase="units please", verb="cbu.list", positive=0.5)
    private.agent.private_user_data = False
    private.agent.save()
    out = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=out)
    assert "0 evidence row(s) are shared, 1 added into shared rows" in out.getvalue()
    row = PhraseEvidence.objects.get(normalized="units please", verb="cbu.list")
    assert row.private_agent_id is None and row.user_id is None
    assert (row.positive, row.signal_count) == (1.5, 2)


def test_an_agent_name_two_tenants_use_needs_the_tenant(catalogue):
    """Agent names are unique per tenant only: a name two tenants use is refused without --tenant, and --tenant picks
    that tenant's agent; nothing of the other tenant changes."""
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    twins = {}
    for tenant in (acme, globex):
        twins[tenant.slug] = make_client(["resolve", "feedback"], name="twin", tenant=tenant).agent
        twins[tenant.slug].private_user_data = True
        twins[tenant.slug].save()
        with tenant_scope([tenant.pk]), acting_agent(twins[tenant.slug]):
            phrase_evidence_add(user_id="alice", phrase="units please", verb="cbu.list", positive=1.0)
        twins[tenant.slug].private_user_data = False
        twins[tenant.slug].save()
    with pytest.raises(CommandError, match="--tenant"):
        call_command("share_private_phrases", "--agent", "twin")
    assert PhraseEvidence.objects.filter(private_agent__isnull=False).count() == 2
    call_command("share_private_phrases", "--agent", "twin", "--tenant", "globex", stdout=StringIO())
    assert set(PhraseEvidence.objects.filter(private_agent__isnull=False).values_list("tenant__slug", flat=True)) == {"acme"}
    with pytest.raises(CommandError, match="Agent twin not found in tenant nowhere"):
        call_command("share_private_phrases", "--agent", "twin", "--tenant", "nowhere")


def test_sharing_waits_until_the_switch_has_reached_every_process(catalogue, settings):
    """Processes keep an agent with its key for API_KEY_CACHE_S: until then a request may still write a private row,
    which a share run at once would leave behind. The service refuses (409 with the wait); the command waits."""
    _, private = _private_then_shared(catalogue)
    settings.API_KEY_CACHE_S = 60
    private.agent.private_user_data = False
    private.agent.save()
    with pytest.raises(Conflict) as refused:
        private_phrases_share(agent=private.agent)
    assert refused.value.code == "switch_settling" and 55 < refused.value.extra["retry_after_s"] <= 60
    assert LearnedPhrase.objects.filter(private_agent=private.agent).count() == 2

    settings.API_KEY_CACHE_S = 0.5
    verified_keys_forget()
    # A request the old switch still reached wrote a private row; the command waits out the window instead of
    # failing, then takes that row with the rest.
    late = Agent.objects.get(pk=private.agent.pk)
    late.private_user_data = True
    with acting_agent(late):
        phrase_evidence_add(user_id="alice", phrase="units now", verb="cbu.list", positive=1.0)
    out = StringIO()
    call_command("share_private_phrases", "--agent", "agent-private", stdout=out)
    assert "1 learned phrase(s) are shared" in out.getvalue()
    assert not LearnedPhrase.objects.filter(private_agent=private.agent, normalized="make me a unit").exists()
    assert not PhraseEvidence.objects.filter(private_agent=private.agent).exists()


def test_an_agent_that_never_kept_its_data_private_has_nothing_to_wait_for(catalogue, settings):
    shared, _ = _shared_and_private()
    settings.API_KEY_CACHE_S = 60
    shared.agent.name = "agent-shared-renamed"
    shared.agent.save()
    result = private_phrases_share(agent=shared.agent)
    assert result["phrases_shared"] == 0 and result["evidence_shared"] == 0


def test_a_task_queued_before_the_switch_and_run_after_the_share_writes_shared_rows(cbus, django_capture_on_commit_callbacks):
    """A click of a private agent's user queues its learning; the worker runs it late (a backlog, a restart), after
    the agent was switched to shared and its data shared. The task acts with the agent as stored when it runs, so
    nothing it writes is left private to an agent that no longer keeps private data."""
    asker = make_client(["resolve", "feedback"], name="asker")
    asker.agent.private_user_data = True
    asker.agent.save()
    verified_keys_forget()
    body = asker.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "u1"}, format="json").json()
    assert body["outcome"] == "ambiguous", body
    verb = body["options"][0]["verb"]
    with django_capture_on_commit_callbacks(execute=False) as queued:  # sent with the sender's agent, not yet run
        r = asker.post(f"/api/v1/disambiguations/{body['request_id']}/select", {"selected_verb": verb}, format="json")
    assert r.status_code == 200 and queued

    agent = Agent.objects.get(pk=asker.agent.pk)
    agent.private_user_data = False
    agent.save()
    private_phrases_share(agent=agent)  # nothing of the click's to share yet
    for callback in queued:  # the worker picks the task up now
        callback()

    learned = LearnedPhrase.objects.filter(user_id="u1", normalized="list all cbus")
    assert learned.exists() and not learned.filter(private_agent__isnull=False).exists()
    assert PhraseEvidence.objects.filter(user_id="u1").exists()
    assert not PhraseEvidence.objects.filter(private_agent=agent).exists()


def test_the_agents_candidates_are_shared_too_and_a_pending_twin_takes_its_evidence(catalogue):
    """A pending candidate the agent's users proposed adds into the shared agents' pending candidate of the same
    text and verb (two 0.85 clicks: 0.98, as one kind's would be); one without a shared twin becomes shared; deleting
    the agent afterwards leaves them (they are no longer its)."""
    from learning.models import LearningCandidate
    from learning.services.candidates import candidate_record

    shared, private = _shared_and_private()
    proposal = {"suggested_output": "cbu.list", "user_id": "alice", "source": "disambiguation", "confidence": 0.85}
    with acting_agent(private.agent):
        mine = candidate_record(input_pattern="show cbus", **proposal)
        alone = candidate_record(input_pattern="list the units", **proposal)
    with acting_agent(shared.agent):
        theirs = candidate_record(input_pattern="show cbus", **proposal)
    assert len({mine.pk, alone.pk, theirs.pk}) == 3 and mine.private_agent_id == private.agent.pk
    private.agent.private_user_data = False
    private.agent.save()
    result = private_phrases_share(agent=private.agent)
    assert (result["candidates_shared"], result["candidates_merged"]) == (1, 1)
    assert not LearningCandidate.objects.filter(pk=mine.pk).exists()
    theirs.refresh_from_db()
    assert theirs.occurrence_count == 2 and theirs.confidence == pytest.approx(1 - 0.15 * 0.15)
    assert set(theirs.seen_by_agents) == {private.agent.pk, shared.agent.pk}
    private.agent.delete()
    alone = LearningCandidate.objects.get(pk=alone.pk)
    assert alone.private_agent_id is None and alone.status == "pending"
