"""Commands about one agent or action take --tenant for a name several tenants use, and refuse text the database
cannot store with a message instead of a traceback."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from actions.models import Action, AutonomyLevel
from agents.selectors import agent_get
from autonomy.models import Episode
from common.api import ApplicationError, Conflict, NotFound
from feedback.models import MistakePattern
from tenants.context import tenant_scope
from tenants.services import tenant_create
from tests.conftest import make_client, reject_n

pytestmark = pytest.mark.django_db

UNDECODABLE = b"\xff".decode("utf-8", "surrogateescape")  # what Python makes of an argv byte that is not UTF-8


@pytest.fixture
def two():
    """An agent "bot" and an action email.send in each of acme and globex; globex's bot made three mistakes."""
    out = {}
    for slug in ("acme", "globex"):
        t = tenant_create(slug=slug)
        client = make_client(["resolve", "feedback"], name="bot", tenant=t)
        with tenant_scope([t.pk]):
            action = Action.objects.create(name="email.send", autonomy_level=AutonomyLevel.ACT_REVIEWED, tenant=t)
        out[slug] = (client.agent, action)
    with tenant_scope([out["globex"][0].tenant_id]):
        reject_n(out["globex"][0], 3)
    return out


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ("detect_mistakes", "--agent", "bot"),
        ("run_autonomy_cycle", "--agent", "bot"),
        ("autonomy_report", "feedback", "bot"),
        ("autonomy_report", "mistakes", "bot"),
        ("autonomy_report", "calibrate", "bot"),
        ("autonomy_report", "full-cycle", "bot"),
        ("autonomy_report", "autonomy", "email.send"),
    ],
)
def test_a_name_in_two_tenants_is_refused_naming_them_and_the_option(two, args):
    with pytest.raises(CommandError) as refused:
        run(*args)
    message = str(refused.value)
    assert "acme, globex" in message and "--tenant SLUG" in message
    assert not Episode.objects.exists()


def test_detect_mistakes_runs_for_the_named_tenants_agent(two):
    assert "1 new pattern(s)" in run("detect_mistakes", "--agent", "bot", "--tenant", "globex")
    assert MistakePattern.objects.get().agent == two["globex"][0]
    assert "0 new pattern(s)" in run("detect_mistakes", "--agent", "bot", "--tenant", "acme")
    with pytest.raises(CommandError, match="not found in tenant initech"):
        run("detect_mistakes", "--agent", "bot", "--tenant", "initech")
    with pytest.raises(CommandError, match="--tenant"):
        run("detect_mistakes", "--tenant", "acme")  # without --agent it reads every agent


def test_run_autonomy_cycle_runs_for_the_named_tenants_agent(two):
    out = run("run_autonomy_cycle", "--agent", "bot", "--tenant", "acme")
    assert "1 cycle(s) run" in out
    assert Episode.objects.get().agent == two["acme"][0]
    with pytest.raises(CommandError, match="--tenant"):
        run("run_autonomy_cycle", "--all", "--tenant", "acme")


def test_autonomy_report_views_take_the_tenant(two):
    globex_bot, globex_send = two["globex"]
    assert f"(#{globex_bot.pk})" in run("autonomy_report", "feedback", "bot", "--tenant", "globex")
    assert "Mistake patterns of bot" in run("autonomy_report", "mistakes", "bot", "--tenant", "globex")
    assert MistakePattern.objects.get().agent == globex_bot
    assert "Calibration of bot" in run("autonomy_report", "calibrate", "bot", "--tenant", "acme")
    assert "Episode #" in run("autonomy_report", "full-cycle", "bot", "--tenant", "acme")
    assert Episode.objects.get().agent == two["acme"][0]
    assert "Autonomy of email.send (level 2)" in run("autonomy_report", "autonomy", "email.send", "--tenant", "globex")
    assert Action.objects.get(pk=globex_send.pk).last_evaluated_at is not None
    assert Action.objects.get(pk=two["acme"][1].pk).last_evaluated_at is None
    with pytest.raises(CommandError, match="not in the catalogue in tenant initech"):
        run("autonomy_report", "autonomy", "email.send", "--tenant", "initech")


def test_agent_get_takes_only_ascii_digits_as_an_id(two):
    with pytest.raises(NotFound, match="Agent ² not found"):
        agent_get(ref="²")  # isdigit() but not a number int() reads
    with pytest.raises(NotFound):
        agent_get(ref="١٢")  # Arabic-Indic digits: a name, not an id
    assert agent_get(ref=str(two["acme"][0].pk)) == two["acme"][0]
    with pytest.raises(CommandError, match="Agent ² not found"):
        run("detect_mistakes", "--agent", "²")
    with pytest.raises(CommandError, match="Agent ² not found"):
        run("autonomy_report", "feedback", "²")


def test_agent_get_refuses_text_the_database_cannot_store(two):
    for ref, tenant in ((UNDECODABLE, None), ("bot", UNDECODABLE), ("bo\x00t", None)):
        with pytest.raises(ApplicationError) as refused:
            agent_get(ref=ref, tenant=tenant)
        assert "surrogate" in refused.value.message or "NUL" in refused.value.message


@pytest.mark.parametrize(
    "args",
    [
        ("detect_mistakes", "--agent", UNDECODABLE),
        ("detect_mistakes", "--agent", "bot", "--tenant", UNDECODABLE),
        ("run_autonomy_cycle", "--agent", UNDECODABLE),
        ("autonomy_report", "mistakes", UNDECODABLE),
        ("autonomy_report", "feedback", "bot", "--tenant", UNDECODABLE),
        ("autonomy_report", "autonomy", "email.send", "--tenant", UNDECODABLE),
        ("search_memories", UNDECODABLE, "--substring"),
        ("search_memories", f"logs {UNDECODABLE}"),
    ],
)
def test_commands_refuse_undecodable_text_with_a_message(two, args):
    with pytest.raises(CommandError, match="surrogate"):
        run(*args)


@pytest.mark.parametrize(
    "args",
    [
        ("run_autonomy_cycle", "--agent", ""),
        ("run_autonomy_cycle", "--agent", "  "),
        ("detect_mistakes", "--agent", ""),
        ("detect_mistakes", "--agent", "bot", "--tenant", ""),
        ("run_autonomy_cycle", "--agent", "bot", "--tenant", " "),
        ("autonomy_report", "feedback", ""),
        ("autonomy_report", "autonomy", "email.send", "--tenant", ""),
    ],
)
def test_an_empty_agent_or_tenant_is_refused_and_never_means_every_agent(two, args):
    """An unset shell variable (``--agent "$AGENT"``) names nothing: the command stops with a message and runs no
    cycle and no detection for anyone."""
    episodes, patterns = Episode.objects.count(), MistakePattern.objects.count()
    with pytest.raises(CommandError, match="is empty"):
        run(*args)
    assert (Episode.objects.count(), MistakePattern.objects.count()) == (episodes, patterns)


def test_digits_that_are_one_agents_id_and_another_agents_name_are_refused_never_one_picked(two):
    acme, globex = two["acme"][0], two["globex"][0]
    named = make_client(["resolve"], name=str(globex.pk), tenant=acme.tenant).agent
    with pytest.raises(Conflict) as refused:
        agent_get(ref=str(globex.pk))
    assert refused.value.code == "ambiguous" and "acme" in refused.value.message and "globex" in refused.value.message
    assert agent_get(ref=str(globex.pk), tenant="acme") == named  # the name, in its tenant
    assert agent_get(ref=str(globex.pk), tenant="globex") == globex  # the id, in its tenant
    assert agent_get(ref=str(acme.pk)) == acme  # digits that only an id holds
    with pytest.raises(CommandError, match="ambiguous|id of agent"):
        run("detect_mistakes", "--agent", str(globex.pk))
    with pytest.raises(NotFound):
        agent_get(ref="9" * 40)  # beyond any id: no agent, no database error


def test_a_memory_purge_for_one_user_stays_in_the_tenant_named(two):
    from datetime import timedelta

    from django.utils import timezone

    from memories.models import Memory, MemoryStatus

    old = timezone.now() - timedelta(days=400)
    for agent in (two["acme"][0], two["globex"][0]):
        with tenant_scope([agent.tenant_id]):
            Memory.objects.create(
                user_id="alice",
                content=f"lesson of {agent.tenant.slug}",
                simhash="0" * 16,
                content_sha256=agent.tenant.slug[0] * 64,
                status=MemoryStatus.DEPRECATED,
            )
            Memory.objects.filter(user_id="alice").update(updated_at=old, deprecated_at=old)
    with pytest.raises(CommandError, match="several tenants.*acme, globex.*--tenant"):
        run("purge_deprecated_memories", "--user", "alice", "--older-than", "30d")
    assert Memory.objects.count() == 2
    assert "deleted 1 deprecated memories" in run(
        "purge_deprecated_memories", "--user", "alice", "--older-than", "30d", "--tenant", "acme"
    )
    assert list(Memory.objects.values_list("tenant__slug", flat=True)) == ["globex"]
    with pytest.raises(CommandError, match="No tenant"):
        run("embed_memories", "--user", "alice", "--tenant", "nowhere")


def test_a_memory_purge_for_one_user_counts_the_tenants_of_their_retrieval_logs_too(two):
    """The purge deletes a user's old retrieval logs as well as their memories: a user id with memories in one
    tenant and retrieval logs in another is two tenants' user, and the purge without --tenant is refused (it
    deleted the other tenant's logs)."""
    from datetime import timedelta

    from django.utils import timezone

    from memories.models import MemoryRetrieval

    old = timezone.now() - timedelta(days=400)
    for agent in (two["acme"][0], two["globex"][0]):
        with tenant_scope([agent.tenant_id]):
            MemoryRetrieval.objects.create(user_id="alice", query_sha256="a" * 64)
            MemoryRetrieval.objects.filter(user_id="alice").update(created_at=old)
    with pytest.raises(CommandError, match="memories or retrieval logs in several tenants.*acme, globex.*--tenant"):
        run("purge_deprecated_memories", "--user", "alice", "--older-than", "30d")
    assert MemoryRetrieval.objects.count() == 2
    run("purge_deprecated_memories", "--user", "alice", "--older-than", "30d", "--tenant", "acme")
    assert list(MemoryRetrieval.objects.values_list("tenant__slug", flat=True)) == ["globex"]


@pytest.mark.django_db(transaction=True)
def test_embedding_one_tenants_memories_commits_batch_by_batch(monkeypatch):
    from django.db import connection

    tenant_create(slug="acme")
    from memories.management.commands import embed_memories

    depths = []

    def backfill(**kwargs):
        depths.append(connection.in_atomic_block)
        return {"embedded": 0, "failed": 0, "model": "m"}

    monkeypatch.setattr(embed_memories, "memories_embed_backfill", backfill)
    run("embed_memories", "--tenant", "acme")
    assert depths == [False]  # no transaction around the batches: each commits on its own
