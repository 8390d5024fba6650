"""Operators' commands and tasks refuse bad input with one clear message and keep what they should keep."""

import datetime
from io import StringIO

import pytest
import uvicorn
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone

from actions.models import Action, AutonomyLevel
from agents.models import Agent, ApiKey
from common.api import ApplicationError
from feedback.models import FeedbackRecord, Proposal
from memories.models import Memory, MemoryRetrieval
from memories.services import memories_purge_deprecated
from review.models import BacklogSnapshot, Claim, Decision
from review.services import backlog_snapshot_take, claim_take
from tenants.models import Membership, Tenant
from tests.conftest import make_memory, make_proposal, reviewer_user

pytestmark = pytest.mark.django_db


def run(*args):
    stdout, err = StringIO(), StringIO()
    call_command(*args, stdout=stdout, stderr=err)
    return stdout.getvalue(), err.getvalue()


def deprecated_since(delta, content="A deprecated lesson about the old deploy script and its flags."):
    m = make_memory(content=content, status="deprecated")
    Memory.objects.filter(pk=m.pk).update(deprecated_at=timezone.now() - delta)
    return m


def retrieval_aged(delta):
    r = MemoryRetrieval.objects.create(user_id="alice", query_sha256="0" * 64, memory_ids=[])
    MemoryRetrieval.objects.filter(pk=r.pk).update(created_at=timezone.now() - delta)
    return r


# --- purge_deprecated_memories ---------------------------------------------------------------


@pytest.mark.parametrize("age", ["0", "0d", "23h", "1439m", "0w"])
def test_purge_refuses_an_age_below_one_day_and_deletes_nothing(age):
    deprecated_since(datetime.timedelta(seconds=5))
    retrieval_aged(datetime.timedelta(seconds=5))
    for extra in (["--dry-run"], []):
        with pytest.raises(CommandError, match="--older-than must be at least 1 day"):
            run("purge_deprecated_memories", "--older-than", age, *extra)
    assert Memory.objects.count() == 1 and MemoryRetrieval.objects.count() == 1


@pytest.mark.parametrize("age", ["99999999999d", "999999w", "36501d", "9" * 5000])
def test_purge_refuses_a_huge_age_with_a_message(age):
    deprecated_since(datetime.timedelta(days=400))
    with pytest.raises(CommandError, match="--older-than must be at most 36500 days"):
        run("purge_deprecated_memories", "--older-than", age)
    assert Memory.objects.count() == 1


def test_purge_accepts_the_bounds():
    old = deprecated_since(datetime.timedelta(days=2))
    stdout, _ = run("purge_deprecated_memories", "--older-than", "24h")
    assert "deleted 1 deprecated" in stdout and not Memory.objects.filter(pk=old.pk).exists()
    stdout, _ = run("purge_deprecated_memories", "--older-than", "36500d", "--dry-run")
    assert "would delete 0 deprecated" in stdout


def test_purge_keeps_retrieval_logs_inside_the_outcome_window(settings):
    settings.MEMORY_OUTCOME_WINDOW_S = 3 * 24 * 3600
    inside = retrieval_aged(datetime.timedelta(days=2))
    outside = retrieval_aged(datetime.timedelta(days=4))
    stdout, _ = run("purge_deprecated_memories", "--older-than", "1d", "--dry-run")
    assert "and 1 retrieval logs" in stdout
    run("purge_deprecated_memories", "--older-than", "1d")
    assert list(MemoryRetrieval.objects.values_list("pk", flat=True)) == [inside.pk]
    assert not MemoryRetrieval.objects.filter(pk=outside.pk).exists()


@pytest.mark.parametrize("days", [0, 36501])
def test_purge_service_refuses_ages_out_of_bounds(days):
    deprecated_since(datetime.timedelta(seconds=5))
    with pytest.raises(ApplicationError) as exc:
        memories_purge_deprecated(older_than=datetime.timedelta(days=days))
    assert exc.value.field == "older_than" and Memory.objects.count() == 1


def test_purge_service_refuses_seconds():
    with pytest.raises(ApplicationError):
        memories_purge_deprecated(older_than=datetime.timedelta(seconds=30), dry_run=True)


# --- memories commands: --user, --limit, --batch-size -----------------------------------------


@pytest.mark.parametrize(
    "command", [["embed_memories", "--no-progress"], ["purge_deprecated_memories"], ["search_memories", "foo", "--substring"]]
)
@pytest.mark.parametrize("user", ["bad user!", "alice\n", ""])
def test_memories_commands_refuse_a_malformed_user(command, user):
    deprecated_since(datetime.timedelta(days=400))
    with pytest.raises(CommandError, match="Malformed --user id"):
        run(*command, "--user", user)
    assert Memory.objects.count() == 1


@pytest.mark.parametrize("value", ["0", "99999999999999999999", "1001"])
def test_search_memories_bounds_limit(value):
    with pytest.raises(CommandError, match="--limit must be between 1 and 1000"):
        run("search_memories", "foo", "--substring", "--limit", value)


@pytest.mark.parametrize("value", ["0", "99999999999999999999", "10001"])
def test_embed_memories_bounds_batch_size(value):
    with pytest.raises(CommandError, match="--batch-size must be between 1 and 10000"):
        run("embed_memories", "--no-progress", "--batch-size", value)


def test_memories_commands_accept_a_good_user_and_limit():
    make_memory(content="Rotate the application logs with logrotate every night at midnight.")
    stdout, _ = run("search_memories", "logrotate", "--substring", "--user", "alice", "--limit", "1000")
    assert "logrotate" in stdout
    stdout, _ = run("purge_deprecated_memories", "--user", "alice", "--dry-run")
    assert "would delete 0" in stdout


# --- review.backlog_snapshot ------------------------------------------------------------------


def test_backlog_snapshot_writes_zero_when_a_queue_empties(one_day):
    agent = Agent.objects.create(name="mailer")
    Action.objects.get_or_create(name="email.send", defaults={"autonomy_level": AutonomyLevel.ACT_REVIEWED})
    proposals = [make_proposal(agent) for _ in range(3)]
    backlog_snapshot_take()
    today = timezone.localdate()
    assert BacklogSnapshot.objects.get(day=today, kind="proposal").waiting == 3
    Proposal.objects.filter(pk__in=[p.pk for p in proposals]).update(status="approved")
    assert backlog_snapshot_take() == 1
    assert BacklogSnapshot.objects.get(day=today, kind="proposal").waiting == 0
    assert BacklogSnapshot.objects.count() == 1


# --- create_agent_key -------------------------------------------------------------------------


def test_create_agent_key_refuses_a_second_active_key_of_the_same_name():
    run("create_agent_key", "planner")
    with pytest.raises(CommandError, match="--key-name: Agent 'planner' already has an active key named 'default'"):
        run("create_agent_key", "planner")
    assert ApiKey.objects.filter(agent__name="planner", name="default").count() == 1
    run("create_agent_key", "planner", "--key-name", "second")
    ApiKey.objects.filter(name="default").update(revoked_at=timezone.now())
    run("create_agent_key", "planner")  # the old one is revoked: the name is free again
    assert ApiKey.objects.filter(agent__name="planner", revoked_at__isnull=True).count() == 2


@pytest.mark.parametrize(
    "args, argument", [(["a\x01b"], "name"), (["ok", "--key-name", "k\x1b[31m"], "--key-name"), (["a\x00b"], "name")]
)
def test_create_agent_key_refuses_control_characters(args, argument):
    with pytest.raises(CommandError, match=f"^{argument}: .*must not contain control characters"):
        run("create_agent_key", *args, "--tenant", "fresh")
    assert not Agent.objects.exists() and not ApiKey.objects.exists()
    assert not Tenant.objects.filter(slug="fresh").exists()


# --- demo -------------------------------------------------------------------------------------


def test_demo_makes_an_existing_reviewer_a_member_of_a_new_tenant(settings, tmp_path):
    settings.DATASETS_DIR = tmp_path
    run("demo", "--no-key", "--tenant", "demo1")
    run("demo", "--no-key", "--tenant", "demo2")
    reviewer = get_user_model().objects.get(username="reviewer")
    assert set(Membership.objects.filter(user=reviewer).values_list("tenant__slug", flat=True)) == {"demo1", "demo2"}
    run("demo", "--no-key", "--tenant", "demo2")  # again: still one membership
    assert Membership.objects.filter(user=reviewer, tenant__slug="demo2").count() == 1


# --- mcp --------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "0", "65536"])
def test_mcp_http_refuses_a_port_out_of_range(monkeypatch, port):
    def never(*args, **kwargs):
        raise AssertionError("uvicorn must not start")

    monkeypatch.setattr(uvicorn, "run", never)
    with pytest.raises(CommandError, match="--port must be between 1 and 65535"):
        call_command("mcp", "--transport", "http", "--port", port)


# --- review_proposal --------------------------------------------------------------------------


@pytest.fixture
def proposal(db):
    Action.objects.get_or_create(name="email.send", defaults={"autonomy_level": AutonomyLevel.ACT_REVIEWED})
    return make_proposal(Agent.objects.create(name="mailer"))


@pytest.mark.parametrize(
    "raw, message",
    [
        ('{"a": NaN}', "--modified-action is not valid JSON: NaN"),
        ('{"a": Infinity}', "--modified-action is not valid JSON: Infinity"),
        ('{"a": 1e400}', "--modified-action: a: Not a finite number"),
        ('{"a": 99999999999999999999}', "--modified-action: a: An integer outside 64 bits"),
        ('{"a": "x\\u0000y"}', "--modified-action: a: The value contains a NUL"),
        ("[1,2]", "--modified-action: Must be a JSON object"),
    ],
)
def test_review_proposal_refuses_bad_modified_action_naming_it(proposal, raw, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        run("review_proposal", str(proposal.pk), "modify", "--modified-action", raw)
    proposal.refresh_from_db()
    assert proposal.status == "pending"


def test_review_proposal_names_category_and_proposal(proposal):
    with pytest.raises(CommandError, match="^--category: At most 60 characters"):
        run("review_proposal", str(proposal.pk), "reject", "--category", "c" * 500)
    with pytest.raises(CommandError, match="^proposal must be a positive id"):
        run("review_proposal", "99999999999999999999", "approve")
    proposal.refresh_from_db()
    assert proposal.status == "pending"
    stdout, _ = run("review_proposal", str(proposal.pk), "modify", "--modified-action", '{"to": "cfo@example.com"}')
    assert "modified" in stdout


def test_review_proposal_keeps_the_inbox_rules_and_logs_the_decision(proposal):
    rita = reviewer_user("rita", "view_proposal", "change_proposal")
    assert claim_take(kind="proposal", object_id=proposal.pk, tenant_id=proposal.tenant_id, user=rita) is not None
    with pytest.raises(CommandError, match="held in the review inbox by rita"):
        run("review_proposal", str(proposal.pk), "reject", "--notes", "no")
    proposal.refresh_from_db()
    assert proposal.status == "pending" and not Decision.objects.exists()
    with pytest.raises(CommandError, match="--reviewer: no active user 'nobody'"):
        run("review_proposal", str(proposal.pk), "reject", "--reviewer", "nobody")

    stdout, _ = run(
        "review_proposal",
        str(proposal.pk),
        "reject",
        "--notes",
        "wrong person",
        "--category",
        "wrong_recipient",
        "--reviewer",
        "rita",
    )
    assert "rejected" in stdout
    decision = Decision.objects.get()
    assert (decision.kind, decision.object_id, decision.verdict, decision.user, decision.reason, decision.category) == (
        "proposal",
        proposal.pk,
        "reject",
        rita,
        "wrong person",
        "wrong_recipient",
    )
    assert not Claim.objects.exists()  # the decision ends the claim, as in the inbox
    record = FeedbackRecord.objects.get(proposal=proposal)
    assert record.created_by == rita and record.source == "command"


def test_review_proposal_without_a_reviewer_is_logged_too(proposal):
    run("review_proposal", str(proposal.pk), "approve")
    decision = Decision.objects.get()
    assert (decision.verdict, decision.user, decision.agent) == ("approve", None, None)
