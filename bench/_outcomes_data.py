"""Synthetic agent outcomes for the feedback and learning-cycle benchmarks, bulk-inserted with generate_series (no Python row loops)."""

from django.db import connection

ACTIONS = 20
EXPLANATIONS = "ARRAY['wrong recipient','too formal','missing attachment','duplicate action','wrong amount','bad timing']"
CATEGORIES = "ARRAY['recipient','tone','timing']"


def make_agents_and_actions(n_agents: int) -> None:
    from actions.models import Action

    Action.objects.bulk_create([Action(name=f"bench.action_{i:02d}", autonomy_level=1 + i % 3) for i in range(ACTIONS)])
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO agents_agent (name, description, is_active, private_user_data, created_at) "
            "SELECT 'bench-agent-' || g, '', true, false, now() FROM generate_series(1, %s) g",
            [n_agents],
        )
        cur.execute("SELECT min(id) FROM agents_agent WHERE name LIKE 'bench-agent-%%'")
        return cur.fetchone()[0]


def feedback_records(n: int, n_agents: int, first_agent: int, days: int = 25) -> None:
    """``n`` feedback records spread over ``n_agents`` agents, 20 actions, the last ``days`` days."""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO feedback_feedbackrecord
                (agent_id, action_id, feedback_type, human_explanation, agent_confidence, action_context, mistake_category,
                 corrected_action, processed, source, created_at)
            SELECT %(a0)s + (g %% %(na)s), a.first + ((g / %(na)s) * 7 + g) %% {ACTIONS},
                   (ARRAY['rejection','correction','execution_incorrect','outcome_failure','manual_override',
                          'execution_correct'])[1 + (g * 31) %% 6],
                   ({EXPLANATIONS})[1 + floor(random() * 6)::int], 0.3 + random() * 0.7, '{{}}'::jsonb,
                   CASE WHEN random() < 0.5 THEN '' ELSE ({CATEGORIES})[1 + floor(random() * 3)::int] END,
                   CASE WHEN random() < 0.3 THEN jsonb_build_object('to', 'user' || floor(random() * 3)::int) END,
                   false, 'api', now() - random() * interval '{days} days'
              FROM generate_series(0, %(n)s - 1) g, (SELECT min(id) AS first FROM actions_action) a
            """,
            {"a0": first_agent, "na": n_agents, "n": n},
        )
        cur.execute("ANALYZE feedback_feedbackrecord")


def outcomes(per_agent: int, n_agents: int, first_agent: int, days: int = 25) -> None:
    """``per_agent`` actions per agent (half proposals, half executions) and the feedback records they imply."""
    half = per_agent // 2
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO feedback_proposal
                (agent_id, action_id, proposed_action, reasoning, confidence, status, review_notes, outcome_error, created_at)
            SELECT %(a0)s + (g %% %(na)s), a.first + (g * 7 / %(na)s) %% {ACTIONS}, '{{"to": "x"}}'::jsonb,
                   jsonb_build_object('confidence', c), c,
                   CASE WHEN r < 0.70 THEN 'completed' WHEN r < 0.85 THEN 'rejected' WHEN r < 0.90 THEN 'failed'
                        WHEN r < 0.95 THEN 'approved' ELSE 'pending' END,
                   '', '', now() - random() * interval '{days} days'
              FROM (SELECT g, 0.3 + random() * 0.7 AS c, random() AS r FROM generate_series(0, %(n)s - 1) g) s,
                   (SELECT min(id) AS first FROM actions_action) a
            """,
            {"a0": first_agent, "na": n_agents, "n": half * n_agents},
        )
        cur.execute(
            f"""
            INSERT INTO feedback_execution
                (agent_id, action_id, params, reasoning, confidence, success, error, review_outcome, review_notes, created_at)
            SELECT %(a0)s + (g %% %(na)s), a.first + (g * 7 / %(na)s + 3) %% {ACTIONS}, '{{}}'::jsonb, '{{}}'::jsonb,
                   0.3 + random() * 0.7, random() < 0.9, '',
                   CASE WHEN r < 0.3 THEN 'correct' WHEN r < 0.4 THEN 'incorrect' END, '',
                   now() - random() * interval '{days} days'
              FROM (SELECT g, random() AS r FROM generate_series(0, %(n)s - 1) g) s,
                   (SELECT min(id) AS first FROM actions_action) a
            """,
            {"a0": first_agent, "na": n_agents, "n": (per_agent - half) * n_agents},
        )
        cur.execute(
            f"""
            INSERT INTO feedback_feedbackrecord
                (agent_id, action_id, proposal_id, feedback_type, original_action, human_explanation, agent_confidence,
                 action_context, mistake_category, processed, source, created_at)
            SELECT agent_id, action_id, id, CASE WHEN status = 'rejected' THEN 'rejection' ELSE 'outcome_failure' END,
                   proposed_action, ({EXPLANATIONS})[1 + floor(random() * 6)::int], confidence, reasoning,
                   CASE WHEN random() < 0.5 THEN '' ELSE ({CATEGORIES})[1 + floor(random() * 3)::int] END,
                   false, 'api', created_at
              FROM feedback_proposal WHERE status IN ('rejected', 'failed') AND agent_id >= %(a0)s AND agent_id < %(a0)s + %(na)s
            """,
            {"a0": first_agent, "na": n_agents},
        )
        cur.execute(
            f"""
            INSERT INTO feedback_feedbackrecord
                (agent_id, action_id, execution_id, feedback_type, original_action, human_explanation, agent_confidence,
                 action_context, mistake_category, processed, source, created_at)
            SELECT agent_id, action_id, id, 'execution_' || review_outcome, params,
                   CASE WHEN review_outcome = 'incorrect' THEN ({EXPLANATIONS})[1 + floor(random() * 6)::int] ELSE '' END,
                   confidence, '{{}}'::jsonb, '', false, 'api', created_at
              FROM feedback_execution WHERE review_outcome IS NOT NULL AND agent_id >= %(a0)s AND agent_id < %(a0)s + %(na)s
            """,
            {"a0": first_agent, "na": n_agents},
        )
        for t in ("feedback_proposal", "feedback_execution", "feedback_feedbackrecord"):
            cur.execute(f"VACUUM ANALYZE {t}")  # what autovacuum does after a bulk load
