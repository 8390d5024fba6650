"""Tenants: every row belongs to one, agents see only their own tenant's, PostgreSQL enforces it too."""

import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient, APIRequestFactory

from actions.models import Action
from agents.authentication import ApiKeyAuthentication, verified_keys_forget
from agents.models import Agent
from autonomy.models import AutonomyTransition, Episode
from learning.models import LearnedPhrase, LearningCandidate, PhraseEvidence, Verb
from learning.services.catalogue import verb_catalogue_load
from mcp_server.server import Outcome, call_tool_sync, error_body
from memories.models import Memory, MemoryRetrieval
from tenants.context import tenant_request, tenant_scope
from tenants.rls import inherit_function_name, tables_with_rls, tenant_owned_tables
from tenants.services import membership_add, tenant_create
from tests.conftest import CBU_VERBS, make_client

pytestmark = pytest.mark.django_db

LESSON = {
    "user_message": "How do I rotate the staging database credentials safely?",
    "assistant_message": "Use the vault rotate command for the staging role, then restart the workers so they pick up the new lease.",
    "meta": {"type": "procedure", "topic": "credential rotation"},
}
# Read before a tenant is known: agents (by key hash) and reviewers' memberships (by user).
IDENTITY_TABLES = {"agents_agent", "agents_historicalagent", "tenants_membership", "tenants_historicalmembership"}


@pytest.fixture
def two(db):
    t1, t2 = tenant_create(slug="acme"), tenant_create(slug="globex")
    with tenant_scope([t1.pk]):
        verb_catalogue_load(entries=CBU_VERBS)
    with tenant_scope([t2.pk]):
        verb_catalogue_load(entries=CBU_VERBS)
    a = make_client(["resolve", "feedback", "governance"], name="agent-a", tenant=t1)
    a2 = make_client(["resolve", "feedback", "governance"], name="agent-a2", tenant=t1)
    b = make_client(["resolve", "feedback", "governance"], name="agent-b", tenant=t2)
    observed = a.post("/api/v1/memories/observe", {"user_id": "alice", **LESSON}, format="json").json()
    assert observed["decision"] == "saved", observed
    corrected = a.post(
        "/api/v1/resolutions/correct",
        {"text": "spin up a fresh client book", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"},
        format="json",
    )
    assert corrected.status_code == 200, corrected.content
    glob = a.post(
        "/api/v1/resolutions/correct",
        {"text": "open a brand new client unit", "wrong_verb": "cbu.list", "correct_verb": "cbu.delete"},
        format="json",
    )
    assert glob.status_code == 200, glob.content
    candidate = LearningCandidate.objects.get(normalized="open a brand new client unit", status="pending")
    return {"t1": t1, "t2": t2, "a": a, "a2": a2, "b": b, "memory": observed["memory_id"], "candidate": candidate}


def test_rows_record_their_tenant_and_writing_agent(two):
    memory = Memory.objects.get(pk=two["memory"])
    assert memory.tenant_id == two["t1"].pk and memory.agent_id == two["a"].agent.pk
    phrase = LearnedPhrase.objects.get(normalized="spin up a fresh client book", user_id="alice")
    assert phrase.tenant_id == two["t1"].pk and phrase.agent_id == two["a"].agent.pk
    assert two["candidate"].tenant_id == two["t1"].pk and two["candidate"].proposed_by_agent_id == two["a"].agent.pk
    assert Verb.objects.filter(name="cbu.delete").count() == 2  # one catalogue per tenant


def test_another_tenants_agent_sees_none_of_its_users(two):
    b = two["b"]
    r = b.post("/api/v1/memories/retrieve", {"user_id": "alice", "query": "rotate staging database credentials"}, format="json")
    assert r.status_code == 200 and r.json()["items"] == []
    r = b.post("/api/v1/memories/search", {"user_id": "alice", "query": "vault rotate"}, format="json")
    assert r.status_code == 200 and all(i["id"] != two["memory"] for i in r.json().get("items", []))
    foreign = b.post(
        "/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": [two["memory"]], "outcome": "failure"}, format="json"
    )
    unknown = b.post(
        "/api/v1/memories/outcome", {"user_id": "alice", "memory_ids": [99_999_999], "outcome": "failure"}, format="json"
    )
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["detail"].replace(str(two["memory"]), "N") == unknown.json()["detail"].replace("99999999", "N")
    assert Memory.objects.get(pk=two["memory"]).status != "deprecated"
    # alice's learned phrase in acme does not steer globex's resolution for its own alice
    resolved = b.post("/api/v1/resolve", {"text": "spin up a fresh client book", "user_id": "alice"}, format="json").json()
    assert not (resolved["outcome"] == "resolved" and resolved.get("source", "").startswith("user_learned"))
    # a correction by globex's agent for "alice" leaves acme's alice untouched
    r = b.post(
        "/api/v1/resolutions/correct",
        {"text": "spin up a fresh client book", "wrong_verb": "cbu.delete", "correct_verb": "cbu.list", "user_id": "alice"},
        format="json",
    )
    assert r.status_code == 200
    acme = LearnedPhrase.objects.get(tenant=two["t1"], normalized="spin up a fresh client book", user_id="alice")
    assert acme.verb.name == "cbu.delete"


def test_the_same_user_id_in_two_tenants_keeps_two_sets_of_evidence(two):
    """Evidence is per tenant: globex's alice correcting the same text adds globex's rows, never acme's."""
    text = "spin up a fresh client book"

    def evidence(tenant):
        rows = PhraseEvidence.objects.filter(tenant=tenant, normalized=text, user_id="alice")
        return {r.verb: (round(r.negative, 4), round(r.positive, 4)) for r in rows}

    before = evidence(two["t1"])
    assert before  # acme's correction left evidence
    for _ in range(2):  # twice: the second adds to globex's own rows
        r = two["b"].post(
            "/api/v1/resolutions/correct",
            {"text": text, "wrong_verb": "cbu.list", "correct_verb": "cbu.delete", "user_id": "alice"},
            format="json",
        )
        assert r.status_code == 200, r.content
    assert evidence(two["t1"]) == before
    assert set(evidence(two["t2"])) == set(before)
    after = evidence(two["t2"])
    assert all(after[v] == (2 * neg, 2 * pos) for v, (neg, pos) in before.items())


def test_another_tenants_ids_answer_404_like_unknown_ones(two):
    b, candidate = two["b"], two["candidate"]
    listed = b.get("/api/v1/learning/candidates").json()
    assert all(row["id"] != candidate.pk for row in listed["results"])
    foreign = b.post(f"/api/v1/learning/candidates/{candidate.pk}/approve", {}, format="json")
    unknown = b.post("/api/v1/learning/candidates/99999999/approve", {}, format="json")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["code"] == unknown.json()["code"]
    candidate.refresh_from_db()
    assert candidate.status == "pending"


def test_same_tenant_agents_share_user_data_unless_private(two):
    a2 = two["a2"]
    query = {"user_id": "alice", "query": "rotate staging database credentials"}
    assert [i["id"] for i in a2.post("/api/v1/memories/retrieve", query, format="json").json()["items"]] == [two["memory"]]
    shared = a2.post("/api/v1/resolve", {"text": "spin up a fresh client book", "user_id": "alice"}, format="json").json()
    assert shared["outcome"] == "resolved" and shared["verb"] == "cbu.delete"
    agent = a2.agent
    agent.private_user_data = True
    agent.save()
    verified_keys_forget()
    assert a2.post("/api/v1/memories/retrieve", query, format="json").json()["items"] == []
    private = a2.post("/api/v1/resolve", {"text": "spin up a fresh client book", "user_id": "alice"}, format="json").json()
    assert not (private["outcome"] == "resolved" and private.get("source", "").startswith("user_learned"))


def test_every_tenant_owned_table_has_forced_row_level_security(two):
    owned = set(tenant_owned_tables(connection)) - IDENTITY_TABLES
    assert "learning_learnedphrase" in owned and "memories_historicalmemory" in owned
    assert owned <= tables_with_rls(connection), sorted(owned - tables_with_rls(connection))


def test_the_app_connects_as_a_role_that_row_level_security_binds(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone() == (False, False)


def test_an_unfiltered_query_inside_a_tenants_request_sees_only_that_tenant(two):
    """The same transaction setup as a request: a deliberately unfiltered query, ORM and raw SQL."""
    assert LearnedPhrase._base_manager.filter(tenant=two["t1"]).exists()
    request = APIRequestFactory().post("/api/v1/resolve")
    request.META["HTTP_AUTHORIZATION"] = f"Bearer {two['b'].raw}"
    with tenant_request():
        agent, _ = ApiKeyAuthentication().authenticate(request)
        assert agent.tenant_id == two["t2"].pk
        assert not LearnedPhrase._base_manager.filter(tenant=two["t1"]).exists()
        assert not Memory._base_manager.exists()
        with connection.cursor() as cursor:
            for table in sorted(set(tenant_owned_tables(connection)) - IDENTITY_TABLES):
                cursor.execute(f'SELECT DISTINCT tenant_id FROM "{table}"')
                assert {row[0] for row in cursor.fetchall()} <= {two["t2"].pk}, table
            # and it cannot write into another tenant either
            with pytest.raises(Exception, match="row-level security"):
                with tenant_scope([two["t2"].pk]):
                    cursor.execute("UPDATE learning_verb SET tenant_id = %s WHERE tenant_id = %s", [two["t1"].pk, two["t2"].pk])
    # after the request the test's own connection sees every tenant again
    assert LearnedPhrase._base_manager.filter(tenant=two["t1"]).exists()


def test_an_agent_never_decides_a_candidate_it_proposed(two):
    a, a2, candidate = two["a"], two["a2"], two["candidate"]
    r = a.post(f"/api/v1/learning/candidates/{candidate.pk}/approve", {}, format="json")
    assert r.status_code == 403 and "proposed" in r.json()["detail"]
    r = a.post(f"/api/v1/learning/candidates/{candidate.pk}/reject", {"reason": "mine"}, format="json")
    assert r.status_code == 403
    candidate.refresh_from_db()
    assert candidate.status == "pending"
    r = a2.post(f"/api/v1/learning/candidates/{candidate.pk}/approve", {}, format="json")
    assert r.status_code == 200, r.content
    candidate.refresh_from_db()
    assert candidate.status == "applied" and candidate.reviewed_by_agent_id == a2.agent.pk


def _transition(tenant) -> AutonomyTransition:
    with tenant_scope([tenant.pk]):
        action, _ = Action.objects.get_or_create(name="email.send", defaults={"autonomy_level": 1})
        return AutonomyTransition.objects.create(
            action=action, from_level=action.autonomy_level, to_level=3, evidence={"success_rate": 0.98, "samples": 60}
        )


def _reviewer(name, tenant, *perms):
    user = get_user_model().objects.create_user(name, password="pw-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=perms))
    membership_add(user=user, tenant=tenant)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return user, client


def test_autonomy_transitions_are_decided_by_a_human_with_the_permission_only(two):
    transition = _transition(two["t1"])
    r = two["a"].post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {}, format="json")
    assert r.status_code == 403 and "human" in r.json()["detail"]
    _, without = _reviewer("viewer", two["t1"], "view_autonomytransition")
    assert without.post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {}, format="json").status_code == 403
    outsider, other = _reviewer("outsider", two["t2"], "approve_autonomytransition")
    assert other.post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {}, format="json").status_code == 404
    transition.refresh_from_db()
    assert transition.status == "proposed" and transition.action.autonomy_level == 1
    user, reviewer = _reviewer("carol", two["t1"], "approve_autonomytransition")
    r = reviewer.post(f"/api/v1/autonomy/transitions/{transition.pk}/approve", {"notes": "evidence is clear"}, format="json")
    assert r.status_code == 200, r.content
    transition.refresh_from_db()
    assert transition.status == "applied" and transition.decided_by == user
    assert Action.objects.get(pk=transition.action_id).autonomy_level == 3


def test_admin_needs_the_permission_and_confirms_naming_action_and_levels(two, client):
    transition = _transition(two["t1"])
    staff, _ = _reviewer("staff", two["t1"], "view_autonomytransition", "change_autonomytransition")
    client.force_login(staff)
    url = f"/admin/autonomy/autonomytransition/{transition.pk}/change/"
    r = client.post(url, {"decision": "approve", "notes": ""})
    assert r.status_code == 403
    r = client.post("/admin/autonomy/autonomytransition/", {"action": "approve_selected", "_selected_action": [transition.pk]})
    transition.refresh_from_db()
    assert transition.status == "proposed"
    approver, _ = _reviewer("approver", two["t1"], "view_autonomytransition", "approve_autonomytransition")
    client.force_login(approver)
    page = client.post("/admin/autonomy/autonomytransition/", {"action": "approve_selected", "_selected_action": [transition.pk]})
    assert page.status_code == 200
    text = page.content.decode()
    assert "email.send" in text and "level 1 → 3" in text
    transition.refresh_from_db()
    assert transition.status == "proposed"  # nothing changes before the confirmation
    client.post(
        "/admin/autonomy/autonomytransition/",
        {"action": "approve_selected", "_selected_action": [transition.pk], "post": "yes", "notes": "ok"},
    )
    transition.refresh_from_db()
    assert transition.status == "applied" and transition.decided_by == approver


def test_reviewers_see_only_their_tenants_in_the_admin(two, client):
    with tenant_scope([two["t2"].pk]):
        LearningCandidate.objects.create(
            input_pattern="globex only phrase", normalized="globex only phrase", suggested_output="cbu.list"
        )
    user, _ = _reviewer("acme-reviewer", two["t1"], "view_learningcandidate", "review_learningcandidate")
    client.force_login(user)
    page = client.get("/admin/learning/learningcandidate/").content.decode()
    assert "open a brand new client unit" in page and "globex only phrase" not in page
    other = LearningCandidate.objects.get(normalized="globex only phrase")
    assert client.get(f"/admin/learning/learningcandidate/{other.pk}/change/").status_code in (302, 404)


def test_rows_written_outside_a_tenant_scope_take_their_parents_tenant(two):
    """Commands, workers and a superuser's admin write with every tenant in view: a row follows its parent."""
    with tenant_scope([two["t2"].pk]):
        action = Action.objects.create(name="crm.update")
    transition = AutonomyTransition.objects.create(action=action, from_level=1, to_level=2, evidence={})
    assert transition.tenant_id == two["t2"].pk
    phrase = LearnedPhrase.objects.create(
        phrase="globex phrase", normalized="globex phrase", verb=Verb.objects.get(tenant=two["t2"], name="cbu.list")
    )
    assert phrase.tenant_id == two["t2"].pk
    assert phrase.history.first().tenant_id == two["t2"].pk


def test_a_bulk_insert_outside_a_scope_follows_each_rows_parent_through_a_per_table_trigger(two):
    """Set-based cycles bulk-insert rows for agents of many tenants at once: each row takes its own agent's tenant,
    through one trigger per table whose lookup is written out (no dynamic query per row) and which a one-tenant
    scope never enters (its WHEN clause)."""
    agents = list(Agent.objects.filter(tenant__in=[two["t1"], two["t2"]]).order_by("pk"))
    episodes = Episode.objects.bulk_create([Episode(agent=a, trigger="command") for a in agents])
    assert [e.tenant_id for e in Episode.objects.filter(pk__in=[e.pk for e in episodes]).order_by("agent_id")] == [
        a.tenant_id for a in agents
    ]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, p.proname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgname = 'tenant_inherit'"
        )
        triggers = cur.fetchall()
    assert {"autonomy_episode", "autonomy_calibrationrecord", "learning_learnedphrase"} <= {t[0] for t in triggers}
    for table, function, definition in triggers:
        assert function == inherit_function_name(table), definition
        assert "WHEN" in definition and "tenants_scope()" in definition, definition


def test_a_resolve_only_key_changes_nothing(two):
    reader = make_client(["resolve"], name="reader", tenant=two["t1"])
    before = Memory.objects.values_list("pk", "hits", "streak", "status", "updated_at").order_by("pk")
    before = list(before)
    counts = {m: m.objects.count() for m in (Memory, LearnedPhrase, LearningCandidate)}
    for _ in range(4):  # more than the streak that would promote a candidate memory
        r = reader.post(
            "/api/v1/memories/retrieve", {"user_id": "alice", "query": "rotate staging database credentials"}, format="json"
        )
        assert r.status_code == 200 and [i["id"] for i in r.json()["items"]] == [two["memory"]]
        assert r.json()["retrieval_id"] is None
        assert reader.post("/api/v1/memories/search", {"user_id": "alice", "query": "vault"}, format="json").status_code == 200
    after = list(Memory.objects.values_list("pk", "hits", "streak", "status", "updated_at").order_by("pk"))
    assert after == before
    assert {m: m.objects.count() for m in counts} == counts
    assert MemoryRetrieval.objects.count() == 0


@pytest.fixture
def acme_objects(two):
    """One object of every kind in acme, made through acme's agent; the ids globex's agent will try."""
    a = two["a"]
    Action.objects.filter(tenant=two["t1"]).delete()
    with tenant_scope([two["t1"].pk]):
        Action.objects.create(name="email.send", autonomy_level=2)
    proposal = a.post(
        "/api/v1/proposals",
        {"action": "email.send", "proposed_action": {"to": "x@example.com"}, "reasoning": {"confidence": 0.9}},
        format="json",
    ).json()["id"]
    execution = a.post(
        "/api/v1/executions",
        {"action": "email.send", "params": {"to": "x"}, "reasoning": {"why": "asked"}, "confidence": 0.9, "success": True},
        format="json",
    ).json()["id"]
    block = a.post(
        "/api/v1/blocklist",
        {"phrase": "wipe it all", "verb": "cbu.delete", "reason": "too risky", "scope": "global"},
        format="json",
    ).json()["id"]
    resolved = a.post("/api/v1/resolve", {"text": "list all cbus", "user_id": "alice"}, format="json").json()
    assert resolved["outcome"] == "ambiguous", resolved
    return {
        **two,
        "proposal": proposal,
        "execution": execution,
        "block": block,
        "request_id": resolved["request_id"],
        "verb": resolved["options"][0]["verb"],
        "transition": _transition(two["t1"]).pk,
    }


def test_every_object_endpoint_answers_another_tenant_as_unknown(acme_objects, client):
    o, b = acme_objects, acme_objects["b"]
    unknown_uuid = "00000000-0000-4000-8000-000000000000"
    calls = [
        ("get", "/api/v1/proposals/{}", "proposal", 99_999_999, None),
        ("post", "/api/v1/proposals/{}/approve", "proposal", 99_999_999, {}),
        ("post", "/api/v1/proposals/{}/reject", "proposal", 99_999_999, {"review_notes": "no"}),
        ("get", "/api/v1/executions/{}", "execution", 99_999_999, None),
        ("post", "/api/v1/executions/{}/review", "execution", 99_999_999, {"outcome": "incorrect"}),
        ("delete", "/api/v1/blocklist/{}", "block", 99_999_999, None),
        ("post", "/api/v1/blocklist/{}/expire", "block", 99_999_999, {}),
        ("post", "/api/v1/disambiguations/{}/select", "request_id", unknown_uuid, {"selected_verb": o["verb"]}),
        ("post", "/api/v1/disambiguations/{}/abandon", "request_id", unknown_uuid, {"reason": "timeout"}),
        ("post", "/api/v1/learning/candidates/{}/reject", "candidate", 99_999_999, {"reason": "no"}),
    ]
    o["candidate"] = o["candidate"].pk
    for method, path, key, unknown, body in calls:
        send = getattr(b, method)
        args = {"format": "json"} if body is not None else {}
        foreign = send(path.format(o[key]), body, **args) if body is not None else send(path.format(o[key]))
        missing = send(path.format(unknown), body, **args) if body is not None else send(path.format(unknown))
        assert foreign.status_code == missing.status_code == 404, (path, foreign.status_code, missing.status_code)
        assert foreign.json()["code"] == missing.json()["code"], path
    # lists: none of acme's rows
    for path in ["/api/v1/proposals", "/api/v1/executions", "/api/v1/feedback-records", "/api/v1/mistake-patterns"]:
        body = b.get(path).json()
        assert (body["results"] if isinstance(body, dict) else body) == [], path
    assert all(t["id"] != o["transition"] for t in b.get("/api/v1/autonomy/transitions").json())
    assert b.get("/api/v1/actions/email.send/consult", {"confidence": 0.5}).status_code == 404
    assert b.get("/api/v1/learning/stats").status_code == 200
    # a reviewer of globex cannot decide acme's transition either
    _, globex_reviewer = _reviewer("globex-rev", two_tenant := o["t2"], "approve_autonomytransition")
    assert two_tenant.slug == "globex"
    assert globex_reviewer.post(f"/api/v1/autonomy/transitions/{o['transition']}/approve", {}, format="json").status_code == 404
    assert AutonomyTransition.objects.get(pk=o["transition"]).status == "proposed"


@pytest.mark.django_db(transaction=True)
def test_a_session_scope_binds_the_connection_for_the_block_and_is_put_back_even_after_an_error(two):
    """``tenant_session`` (long work, such as a decision fit): statements in autocommit see the tenant's rows only,
    and afterwards the connection sees what it saw before, also when the block fails."""
    from django.db import DatabaseError, transaction

    from tenants.context import tenant_filter_ids, tenant_session
    from tenants.selectors import tenant_get

    acme = tenant_get(slug="acme").pk

    def visible():
        with connection.cursor() as cur:
            cur.execute("SELECT current_setting('app.tenant_ids'), count(DISTINCT tenant_id) FROM learning_verb")
            return cur.fetchone()

    before = visible()
    assert before == ("*", 2)
    with tenant_session([acme]):
        assert not connection.in_atomic_block and tenant_filter_ids() == (acme,)
        assert visible() == (str(acme), 1)
        with transaction.atomic():  # the work's own transactions see the scope too
            assert visible() == (str(acme), 1)
    assert visible() == before and tenant_filter_ids() is None
    with pytest.raises(DatabaseError), tenant_session([acme]):
        with connection.cursor() as cur:
            cur.execute("SELECT 1 / 0")
    assert visible() == before
    with transaction.atomic(), tenant_session([acme]):  # inside a transaction: that transaction's scope
        assert visible() == (str(acme), 1)
    assert visible() == before
    with tenant_session([acme]):  # a connection opened inside the block (the old one closed) takes its scope
        connection.close()
        assert visible() == (str(acme), 1)
    assert visible() == before
    from tenants import context

    real = context._session_set

    def failing_restore(conn, value):
        if value == before[0]:
            raise DatabaseError("connection lost")
        real(conn, value)

    context._session_set = failing_restore
    try:
        with tenant_session([acme]):
            pid = connection.connection.info.backend_pid
    finally:
        context._session_set = real
    assert connection.connection is None  # closed rather than left in the block's scope
    assert visible() == before and connection.connection.info.backend_pid != pid


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_a_session_scope_is_one_transaction(two, settings):
    """PgBouncer in transaction mode hands each transaction any server connection: nothing may be left on one."""
    from tenants.context import tenant_session
    from tenants.selectors import tenant_get

    settings.DB_TRANSACTION_POOLER = True
    with tenant_session([tenant_get(slug="acme").pk]):
        assert connection.in_atomic_block
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_ids')")
        assert cur.fetchone()[0] == "*"


@pytest.mark.parametrize(
    "argv, module, expected", [(["gunicorn"], "config.wsgi", "none"), (["celery", "worker"], "config.celery", "*")]
)
def test_web_processes_see_no_tenant_outside_a_request_and_workers_every_tenant(db, argv, module, expected):
    code = (
        f"import sys; sys.argv = {argv!r}; import {module}; import django; django.setup(); "
        "from django.db import connection; c = connection.cursor(); "
        "c.execute(\"SELECT current_setting('app.tenant_ids')\"); print(c.fetchone()[0])"
    )
    env = {k: v for k, v in os.environ.items() if k != "DB_TENANT_DEFAULT"}
    env["EMBEDDED_DB_NAME"] = connection.settings_dict["NAME"]
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == expected, out.stderr[-2000:]


def test_mcp_tools_answer_another_tenants_ids_as_unknown(acme_objects):
    """The MCP tools use the same selectors inside the same tenant transaction as REST."""
    o, auth = acme_objects, f"Bearer {acme_objects['b'].raw}"
    calls = [
        ("get_proposal", {"proposal": o["proposal"]}, {"proposal": 99_999_999}),
        ("approve_learning_candidate", {"candidate_id": o["candidate"].pk}, {"candidate_id": 99_999_999}),
        ("select_option", {"request_id": o["request_id"], "selected_verb": o["verb"]}, None),
        ("retrieve_memories", {"user_id": "alice", "query": "rotate staging database credentials"}, None),
    ]

    def _in_django(fn, tool, authorization, client, arguments):
        """As the server runs a call: one tenant transaction, REST's error bodies (without closing connections)."""
        try:
            with tenant_request():
                return fn(tool, authorization, client, arguments)
        except Exception as exc:
            return Outcome(error=error_body(exc))

    for name, foreign_args, unknown_args in calls:
        foreign = _in_django(call_tool_sync, name, auth, "test", foreign_args)
        if name == "retrieve_memories":
            assert foreign.error is None and foreign.data["items"] == []
            continue
        assert foreign.error is not None and foreign.error["code"] == "not_found", (name, foreign)
        if unknown_args is not None:
            unknown = _in_django(call_tool_sync, name, auth, "test", unknown_args)
            assert unknown.error["code"] == foreign.error["code"], name
    o["candidate"].refresh_from_db()
    assert o["candidate"].status == "pending"


def test_only_superusers_manage_tenants_and_memberships(two, client):
    reviewer, _ = _reviewer("acme-rev", two["t1"], "view_learningcandidate")
    client.force_login(reviewer)
    assert client.get("/admin/tenants/tenant/").status_code == 403
    assert client.get("/admin/tenants/membership/").status_code == 403
    boss = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-123456")
    client.force_login(boss)
    page = client.get(f"/admin/tenants/tenant/{two['t1'].pk}/change/")
    assert page.status_code == 200 and "acme-rev" in page.content.decode()
    assert "globex" in client.get("/admin/tenants/tenant/").content.decode()


def test_a_candidate_decided_in_a_scope_of_every_tenant_teaches_its_own_tenant(two):
    """A superuser's admin sees every tenant: approving acme's candidate uses acme's verb and writes acme's phrase,
    even where another tenant has a verb of the same name."""
    from learning.services.candidates import candidate_approve
    from tenants.context import ALL

    with tenant_scope(ALL):
        candidate_approve(candidate=LearningCandidate.objects.get(pk=two["candidate"].pk))
    phrase = LearnedPhrase.objects.get(normalized="open a brand new client unit", user_id=None)
    assert phrase.tenant_id == two["t1"].pk and phrase.verb.tenant_id == two["t1"].pk
    assert not LearnedPhrase.objects.filter(tenant=two["t2"], normalized="open a brand new client unit").exists()


def test_a_persons_tenants_are_read_once_per_request_user_and_again_after_a_membership_is_added(db):
    """The scope middleware and the page both ask for a person's tenants: one read of their memberships per user
    object (a request's), and a membership added through the service is seen on the next ask."""
    from django.test.utils import CaptureQueriesContext

    from tenants.selectors import user_tenant_ids

    person = get_user_model().objects.create_user("pia", password="pw-1234-xyz", is_staff=True)
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    membership_add(user=person, tenant=acme)
    with CaptureQueriesContext(connection) as seen:
        assert user_tenant_ids(person) == (acme.pk,)
        assert user_tenant_ids(person) == (acme.pk,)
    assert len(seen.captured_queries) == 1
    membership_add(user=person, tenant=globex)
    assert sorted(user_tenant_ids(person)) == sorted([acme.pk, globex.pk])
    assert user_tenant_ids(get_user_model().objects.get(pk=person.pk)) != ()  # a fresh object reads them


def test_a_membership_added_for_a_requests_lazy_user_is_seen_by_the_next_ask(db):
    """A request's user is a lazy object: adding a membership through it refreshes its cached tenants too."""
    from django.utils.functional import SimpleLazyObject

    from tenants.selectors import user_tenant_ids

    person = get_user_model().objects.create_user("lia", password="pw-1234-xyz", is_staff=True)
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    membership_add(user=person, tenant=acme)
    lazy = SimpleLazyObject(lambda: person)
    assert user_tenant_ids(lazy) == (acme.pk,)
    membership_add(user=lazy, tenant=globex)
    assert sorted(user_tenant_ids(lazy)) == sorted([acme.pk, globex.pk])
