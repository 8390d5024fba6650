"""Set-based autonomy cycles give what the per-agent cycles give, lock per agent, and run in chunks."""

import random
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition, CalibrationRecord, Episode
from autonomy.services import LOCK_NAMESPACE_CYCLE, autonomy_cycle_run, autonomy_cycles_run
from autonomy.tasks import autonomy_cycle_all
from feedback.models import CorrectionRule, Execution, FeedbackRecord, MistakePattern, Proposal
from tests.conftest import advisory_lock_held_elsewhere

EXPLANATIONS = ["wrong recipient", "too formal", "missing attachment", ""]
CATEGORIES = ["", "recipient", "tone"]


def build(n_agents=4, seed=7):
    """Agents with proposals, executions and feedback records over five actions (one good, one bad, three mixed)."""
    rng = random.Random(seed)
    actions = [Action.objects.create(name=f"set.action_{i}", autonomy_level=lvl) for i, lvl in enumerate([1, 2, 3, 2, 1])]
    agents = [Agent.objects.create(name=f"set-agent-{i}") for i in range(n_agents)]
    now = timezone.now()
    props, execs = [], []
    for ai, agent in enumerate(agents):
        for xi, action in enumerate(actions):
            if ai == n_agents - 1 and xi == 4:
                continue  # the last agent never uses the last action
            for _ in range(rng.randint(8, 30)):
                r = rng.random()
                good = xi == 0  # set.action_0 earns a promotion, set.action_1 a demotion
                status = (
                    "completed"
                    if good or (xi != 1 and r < 0.6)
                    else ("rejected" if r < 0.85 or xi == 1 else "failed" if r < 0.93 else "pending")
                )
                props.append(
                    Proposal(
                        agent=agent,
                        action=action,
                        proposed_action={"to": "x"},
                        reasoning={},
                        confidence=round(rng.uniform(0.3, 1.0), 3),
                        status=status,
                        modified_action={"to": "y"} if status == "completed" and not good and rng.random() < 0.1 else None,
                    )
                )
            for _ in range(rng.randint(5, 15)):
                r = rng.random()
                execs.append(
                    Execution(
                        agent=agent,
                        action=action,
                        confidence=round(rng.uniform(0.3, 1.0), 3),
                        success=xi == 0 or rng.random() < 0.85,
                        review_outcome=None if xi == 0 or r < 0.5 else ("correct" if r < 0.8 else "incorrect"),
                    )
                )
    Proposal.objects.bulk_create(props)
    Execution.objects.bulk_create(execs)
    records = []
    for p in Proposal.objects.filter(status__in=["rejected", "failed"]).order_by("id"):
        records.append(
            FeedbackRecord(
                agent_id=p.agent_id,
                action_id=p.action_id,
                proposal=p,
                feedback_type="rejection" if p.status == "rejected" else "outcome_failure",
                human_explanation=rng.choice(EXPLANATIONS),
                mistake_category=rng.choice(CATEGORIES),
                corrected_action={"to": f"user{rng.randint(0, 1)}"} if rng.random() < 0.4 else None,
                agent_confidence=p.confidence,
            )
        )
    for e in Execution.objects.filter(review_outcome__isnull=False).order_by("id"):
        records.append(
            FeedbackRecord(
                agent_id=e.agent_id,
                action_id=e.action_id,
                execution=e,
                feedback_type=f"execution_{e.review_outcome}",
                human_explanation=rng.choice(EXPLANATIONS) if e.review_outcome == "incorrect" else "",
                agent_confidence=e.confidence,
            )
        )
    FeedbackRecord.objects.bulk_create(records)
    # spread everything over the last 20 days (auto_now_add set "now" on insert)
    with connection.cursor() as cur:
        for table in ("feedback_proposal", "feedback_execution"):
            cur.execute(f"UPDATE {table} SET created_at = now() - (id %% 20) * interval '1 day'", [])
        cur.execute(
            "UPDATE feedback_feedbackrecord fr SET created_at = COALESCE(p.created_at, e.created_at) "
            "FROM feedback_feedbackrecord f LEFT JOIN feedback_proposal p ON p.id = f.proposal_id "
            "LEFT JOIN feedback_execution e ON e.id = f.execution_id WHERE f.id = fr.id"
        )
    assert now  # (kept for readability of the helper)
    return agents


def more_feedback(agents):
    """A second round's news: three more rejections for every agent on set.action_2 (updated patterns)."""
    action = Action.objects.get(name="set.action_2")
    FeedbackRecord.objects.bulk_create(
        [
            FeedbackRecord(agent=a, action=action, feedback_type="rejection", human_explanation="late again")
            for a in agents
            for _ in range(3)
        ]
    )


def same(a, b) -> bool:
    """Equal, floats up to the last rounded digit (a sum of floats in another order can round the 6th decimal
    the other way); strings compared with their numbers the same way (an ECE or an adjustment printed in a message)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 2e-6
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str) and a != b:
        na, nb = re.split(r"(-?\d+\.\d+)", a), re.split(r"(-?\d+\.\d+)", b)
        return len(na) == len(nb) and all(
            x == y or (i % 2 == 1 and abs(float(x) - float(y)) <= 2e-3) for i, (x, y) in enumerate(zip(na, nb, strict=True))
        )
    return a == b


def _f(x):
    return None if x is None else round(x, 9)


def snapshot():
    patterns = sorted(
        (p.agent.name, p.action.name, p.category, p.description, p.occurrence_count, p.status, p.common_explanation)
        for p in MistakePattern.objects.select_related("agent", "action")
    )
    rules = sorted(
        (r.agent.name, r.action.name, r.pattern.category, r.precondition, str(r.correction), r.status, r.require_review)
        for r in CorrectionRule.objects.select_related("agent", "action", "pattern")
    )
    calibration = [
        (
            c.agent.name,
            c.action.name if c.action_id else None,
            c.window_days,
            c.sample_count,
            c.total_samples,
            c.buckets,
            _f(c.ece),
            _f(c.mean_confidence),
            _f(c.mean_success),
            _f(c.overconfidence_rate),
            _f(c.underconfidence_rate),
            _f(c.raw_adjustment),
            _f(c.recommended_adjustment),
            c.episode.agent.name,
        )
        for c in CalibrationRecord.objects.select_related("agent", "action", "episode__agent").order_by(
            "agent_id", "action_id", "id"
        )
    ]
    transitions = []
    for t in AutonomyTransition.objects.select_related("action", "episode__agent").order_by("action__name", "id"):
        evidence = {k: v for k, v in t.evidence.items() if k not in ("recent_patterns", "evaluated_at")}
        transitions.append((t.action.name, t.from_level, t.to_level, t.status, t.reason, t.episode.agent.name, evidence))
    episodes = [
        (e.agent.name, e.status, e.summary, e.summary_text, [(ev.seq, ev.kind, ev.message) for ev in e.events.order_by("seq")])
        for e in Episode.objects.select_related("agent").order_by("agent__name", "id")
    ]
    return {"patterns": patterns, "rules": rules, "calibration": calibration, "transitions": transitions, "episodes": episodes}


def forget_derived():
    """Back to the raw data, as if no cycle had ever run."""
    FeedbackRecord.objects.update(pattern=None, correction_rule=None, processed=False, processed_at=None)
    CorrectionRule.objects.all().delete()
    CorrectionRule.history.all().delete()
    MistakePattern.objects.all().delete()
    CalibrationRecord.objects.all().delete()
    AutonomyTransition.objects.all().delete()
    Episode.objects.all().delete()
    Action.objects.update(last_evaluated_at=None)


def two_rounds(run_round, agents):
    run_round(force=False)
    more_feedback(agents)
    run_round(force=True)  # every action was evaluated moments ago: force evaluates them again
    FeedbackRecord.objects.filter(human_explanation="late again").delete()


@pytest.mark.django_db
def test_set_based_cycles_equal_per_agent_cycles():
    agents = build()
    ids = [a.pk for a in agents]

    def per_agent(force):
        for agent_id in ids:
            assert autonomy_cycle_run(agent_id=agent_id, trigger="test", force_autonomy=force).status == "completed"

    def set_based(force):
        result = autonomy_cycles_run(agent_ids=list(reversed(ids)), trigger="test", force_autonomy=force)
        assert [e.agent_id for e in result.episodes] == ids and not result.skipped
        assert all(e.status == "completed" for e in result.episodes)

    two_rounds(per_agent, agents)
    expected = snapshot()
    forget_derived()
    two_rounds(set_based, agents)
    got = snapshot()

    # the data exercise every step
    assert len(expected["patterns"]) >= 8 and any(p[5] == "mitigated" for p in expected["patterns"])
    assert len(expected["rules"]) >= 8
    assert any(c[6] is not None for c in expected["calibration"]) and any(c[12] != 0 for c in expected["calibration"])
    assert {(t[0], t[1], t[2]) for t in expected["transitions"]} >= {("set.action_0", 1, 2), ("set.action_1", 2, 1)}
    kinds = {ev[1] for e in expected["episodes"] for ev in e[4]}
    assert {"pattern_detected", "pattern_updated", "rule_created", "calibration", "transition_proposed"} <= kinds

    for key in ("patterns", "rules", "calibration", "transitions", "episodes"):
        assert len(got[key]) == len(expected[key]), key
        for i, (g, e) in enumerate(zip(got[key], expected[key], strict=True)):
            assert same(g, e), (key, i, g, e)


@pytest.mark.django_db(transaction=True)
def test_agents_another_worker_is_running_are_skipped():
    agents = build(n_agents=3)
    locked = agents[1].pk
    with advisory_lock_held_elsewhere(LOCK_NAMESPACE_CYCLE, locked):
        result = autonomy_cycles_run(agent_ids=[a.pk for a in agents] + [10**9])
        assert result.skipped == [locked] and result.missing == [10**9]
        assert sorted(e.agent_id for e in result.episodes) == [agents[0].pk, agents[2].pk]
        assert not Episode.objects.filter(agent_id=locked).exists()
        # the locks of the set are released: the per-agent cycle can take them at once
        assert autonomy_cycle_run(agent_id=agents[0].pk) is not None
    # a second set-based run is idempotent: nothing new, nothing duplicated
    before = MistakePattern.objects.count(), CorrectionRule.objects.count(), AutonomyTransition.objects.count()
    result = autonomy_cycles_run(agent_ids=[agents[0].pk, agents[2].pk])
    assert all(e.summary["patterns_new"] == 0 and e.summary["rules_created"] == 0 for e in result.episodes)
    assert (MistakePattern.objects.count(), CorrectionRule.objects.count(), AutonomyTransition.objects.count())[1:] == before[1:]


@pytest.mark.django_db
def test_cycle_all_queues_chunks_and_the_command_runs_them(settings):
    settings.AUTONOMY_CYCLE_CHUNK = 2
    agents = build(n_agents=5)
    Agent.objects.create(name="idle", is_active=False)
    assert autonomy_cycle_all.apply().get() == 5  # eager: 3 chunk tasks
    assert Episode.objects.filter(status="completed").count() == 5
    assert set(Episode.objects.values_list("agent_id", flat=True)) == {a.pk for a in agents}
    stdout = StringIO()
    call_command("run_autonomy_cycle", "--all", "--chunk", "3", stdout=stdout)
    assert "5 cycle(s) run, 0 skipped" in stdout.getvalue()
    assert Episode.objects.filter(status="completed").count() == 10
    stdout = StringIO()
    call_command("run_autonomy_cycle", "--agent", agents[0].name, stdout=stdout)
    assert "Episode #" in stdout.getvalue()
    assert timezone.now() - Episode.objects.latest("started_at").started_at < timedelta(minutes=5)


@pytest.mark.django_db
def test_a_set_that_spans_tenants_says_due_as_each_agents_own_cycle_in_its_tenant_would():
    """One tenant's actions were all evaluated moments ago, another's are due: the first tenant's agent is told its
    evaluation was skipped (as its own cycle, in its tenant's scope, would say), not "0 evaluated" because of the
    other tenant's actions; the other tenant's agent evaluates its own."""
    from tenants.context import tenant_scope
    from tenants.services import tenant_create

    agents = {}
    for slug, evaluated in (("acme", timezone.now()), ("globex", None)):
        tenant = tenant_create(slug=slug)
        with tenant_scope([tenant.pk]):
            action = Action.objects.create(name="email.send", autonomy_level=2, last_evaluated_at=evaluated)
            agent = agents[slug] = Agent.objects.create(name="mailer")
            Proposal.objects.bulk_create(
                [Proposal(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=0.9, status="completed")] * 5
            )

    def evaluation_message(slug):
        episode = Episode.objects.get(agent=agents[slug])
        return episode.events.get(kind="autonomy_evaluation").message

    result = autonomy_cycles_run(agent_ids=[agents["acme"].pk, agents["globex"].pk], trigger="test")
    assert not result.skipped and len(result.episodes) == 2
    assert evaluation_message("acme").startswith("skipped: every action was evaluated")
    assert evaluation_message("globex") == "1 action(s) evaluated, 0 transition(s) proposed"

    # the per-agent cycle of acme's agent says the same, in acme's scope (as its task runs) or in all (a command)
    for scope in ([agents["acme"].tenant_id], "*"):
        Episode.objects.filter(agent=agents["acme"]).delete()
        with tenant_scope(scope):
            autonomy_cycle_run(agent_id=agents["acme"].pk, trigger="test")
        assert evaluation_message("acme").startswith("skipped: every action was evaluated"), scope
