"""Per-tenant partial HNSW indexes on learned phrases: made for tenants that need them, used by the planner
through the app's own tenant filter, dropped when a tenant shrinks, and the command's errors."""

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from learning.models import LearnedPhrase, Verb
from learning.selectors.indexes import TENANT_INDEX_PREFIX, learned_tenant_indexes
from learning.services.catalogue import verb_catalogue_load
from learning.services.indexes import learned_phrase_tenant_indexes_sync
from tenants.context import tenant_scope
from tenants.selectors import tenant_default
from tenants.services import tenant_create
from tests.conftest import CBU_VERBS

pytestmark = pytest.mark.django_db


def _phrases(tenant, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with tenant_scope([tenant.pk]):
        if not Verb.objects.exists():
            verb_catalogue_load(entries=CBU_VERBS)
        verb = Verb.objects.get(name="cbu.list")
        vectors = rng.normal(size=(n, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        LearnedPhrase.objects.bulk_create(
            [
                LearnedPhrase(
                    phrase=f"p{seed}-{i}", normalized=f"p{seed}-{i}", verb=verb, embedding=v.tolist(), embedding_model="m"
                )
                for i, v in enumerate(vectors)
            ]
        )


def _nearest(vector):
    """The tier rows of the tenant in scope for ``vector`` (three of each kind), as the resolver asks for them."""
    from learning.selectors.tiers import tier_rows

    return tier_rows(
        normalized="no such text",
        vector=vector,
        model="m",
        user_id=None,
        domain=None,
        k_learned=3,
        k_catalogue=3,
        k_blocks=3,
        block_threshold=0.9,
    )


@pytest.fixture
def tenants(db):
    big, small = tenant_create(slug="big"), tenant_create(slug="small")
    _phrases(tenant_default(), 100, 1)
    _phrases(big, 30, 2)
    _phrases(small, 8, 3)
    return {"big": big, "small": small, "default": tenant_default()}


def test_a_tenant_with_enough_phrases_gets_its_own_index_which_its_filter_selects(tenants):
    result = learned_phrase_tenant_indexes_sync(min_phrases=10)
    big = tenants["big"].pk
    # big: 30 >= 10 and under half of 138; small: under the minimum; default: more than half (the global index serves it)
    assert result.created == [big] and learned_tenant_indexes() == {big: True}
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [f"{TENANT_INDEX_PREFIX}{big}"])
        definition = cur.fetchone()[0]
    assert "USING hnsw (embedding vector_cosine_ops)" in definition and f"WHERE (tenant_id = {big})" in definition
    with tenant_scope([big]), connection.cursor() as cur:
        # the tier query's filter, tenant_id = ANY(ids): the planner proves the partial index's predicate from it
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL enable_sort = off")  # a tiny table: make an ordered index scan the only choice
        cur.execute(
            "EXPLAIN SELECT id FROM learning_learnedphrase t WHERE t.tenant_id = ANY(%s) "
            "ORDER BY t.embedding <=> (SELECT embedding FROM learning_learnedphrase LIMIT 1) LIMIT 5",
            [[big]],
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert f"{TENANT_INDEX_PREFIX}{big}" in plan, plan
    # a second run changes nothing
    again = learned_phrase_tenant_indexes_sync(min_phrases=10)
    assert again.kept == [big] and not (again.created or again.dropped or again.rebuilt)


def test_an_index_stays_near_the_threshold_and_goes_when_its_tenant_shrinks(tenants):
    big = tenants["big"].pk
    learned_phrase_tenant_indexes_sync(min_phrases=10)
    with tenant_scope([big]):
        LearnedPhrase.objects.filter(pk__in=LearnedPhrase.objects.order_by("pk").values("pk")[:22]).delete()  # 8 left
    assert learned_phrase_tenant_indexes_sync(min_phrases=10).kept == [big]  # 8 >= 10 / 2: kept, no flapping
    with tenant_scope([big]):
        LearnedPhrase.objects.filter(pk__in=LearnedPhrase.objects.order_by("pk").values("pk")[:4]).delete()  # 4 left
    assert learned_phrase_tenant_indexes_sync(min_phrases=10).dropped == [big]
    assert learned_tenant_indexes() == {}


def test_the_command_reports_and_refuses_a_bad_minimum(tenants, capsys):
    call_command("sync_tenant_indexes", "--min-phrases", "10")
    shown = capsys.readouterr()
    assert f"created [{tenants['big'].pk}]" in shown.out
    assert "tenant indexes: 100%" in shown.err  # tqdm's bar over the tenants
    with pytest.raises(CommandError, match="positive"):
        call_command("sync_tenant_indexes", "--min-phrases", "0")


def test_a_tenant_with_its_own_index_walks_it_and_finds_its_nearest_phrases(tenants):
    """The tier query of a tenant with its own index turns sorting off for that statement (the planner would read
    and sort the tenant's rows instead); the answer is the same nearest phrase either way; other tenants unchanged."""
    from django.test.utils import CaptureQueriesContext

    learned_phrase_tenant_indexes_sync(min_phrases=10)
    for tenant, walks in ((tenants["big"], True), (tenants["small"], False)):
        with tenant_scope([tenant.pk]):
            target = LearnedPhrase.objects.order_by("pk")[3]
            vector = np.asarray(target.embedding, dtype=np.float32)
            with CaptureQueriesContext(connection) as ctx:
                rows = _nearest(vector)
        assert rows.learned[0].text == target.phrase and rows.learned[0].similarity == pytest.approx(1.0, abs=1e-5)
        assert any("enable_sort = off" in q["sql"] for q in ctx.captured_queries) is walks


def test_the_prepared_tier_statement_keeps_walking_a_tenants_index_once_its_plan_is_generic(tenants):
    """The tier statement is prepared once per connection; after five runs PostgreSQL may keep one generic plan.
    The tenant is a literal in its text, so that plan still proves the partial index's predicate: every run walks
    the tenant's own index, and each run answers its own query."""
    learned_phrase_tenant_indexes_sync(min_phrases=10)
    big = tenants["big"].pk
    with tenant_scope([big]):
        targets = list(LearnedPhrase.objects.order_by("pk")[:8])
        for target in targets:
            rows = _nearest(np.asarray(target.embedding, dtype=np.float32))
            assert rows.learned[0].text == target.phrase
        with connection.cursor() as cur:
            # index scans of this transaction so far
            cur.execute("SELECT pg_stat_get_xact_numscans(%s::regclass)", [f"{TENANT_INDEX_PREFIX}{big}"])
            assert cur.fetchone()[0] == len(targets)
            cur.execute(
                "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                [f"%learning_learnedphrase%tenant_id = ANY('{{{big}}}'::bigint[])%"],
            )
            assert cur.fetchone()[0] >= 1


def test_a_sync_while_another_runs_does_nothing(tenants):
    """A second sync (the hourly beat while a long build runs) took the build in progress for a failed one's
    leftover, dropped it and deadlocked with it; now it sees the first holds the lock and leaves."""
    from learning.services.indexes import LOCK_NAMESPACE_INDEXES
    from tests.conftest import advisory_lock_held_elsewhere

    with advisory_lock_held_elsewhere(LOCK_NAMESPACE_INDEXES):
        result = learned_phrase_tenant_indexes_sync(min_phrases=10)
        assert result.busy and not (result.created or result.dropped or result.rebuilt) and learned_tenant_indexes() == {}
        with pytest.raises(CommandError, match="Another sync"):
            call_command("sync_tenant_indexes", "--min-phrases", "10", "--no-progress")
    assert learned_phrase_tenant_indexes_sync(min_phrases=10).created == [tenants["big"].pk]


def test_one_tenants_failing_build_does_not_stop_the_others(tenants, monkeypatch):
    from learning.services import indexes

    other = tenant_create(slug="other")
    _phrases(other, 30, 4)
    big, real = tenants["big"].pk, indexes._create

    def create(tenant_id, definition, concurrently):
        if tenant_id == big:
            raise RuntimeError("out of memory for the build")
        return real(tenant_id, definition, concurrently)

    monkeypatch.setattr(indexes, "_create", create)
    result = learned_phrase_tenant_indexes_sync(min_phrases=10)
    assert result.failed == [big] and result.created == [other.pk] and learned_tenant_indexes() == {other.pk: True}
    with pytest.raises(CommandError, match=f"tenant\\(s\\) \\[{big}\\] failed"):
        call_command("sync_tenant_indexes", "--min-phrases", "10", "--no-progress")
    monkeypatch.setattr(indexes, "_create", real)
    assert learned_phrase_tenant_indexes_sync(min_phrases=10).created == [big]  # the next run builds it
