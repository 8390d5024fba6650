"""Reads for proposals, executions, feedback records, mistake patterns and correction rules."""

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from common.api import ApplicationError, NotFound
from feedback.models import (
    CorrectionRule,
    CorrectionRuleStatus,
    Execution,
    FeedbackRecord,
    FeedbackType,
    MistakePattern,
    PatternStatus,
    Proposal,
)


def _filter(qs, filters: dict, allowed: dict):
    for key, lookup in allowed.items():
        value = filters.get(key)
        if value not in (None, ""):
            qs = qs.filter(**{lookup: value})
    return qs


def proposal_get(*, agent, pk: int) -> Proposal:
    obj = Proposal.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise NotFound(f"Proposal {pk} not found.", field="id")
    return obj


def proposal_list(*, agent, filters: dict):
    qs = Proposal.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "status": "status"})


def execution_get(*, agent, pk: int) -> Execution:
    obj = Execution.objects.select_related("action").filter(agent=agent, pk=pk).first()
    if obj is None:
        raise NotFound(f"Execution {pk} not found.", field="id")
    return obj


def execution_list(*, agent, filters: dict):
    qs = Execution.objects.select_related("action").filter(agent=agent)
    return _filter(qs, filters, {"action": "action__name", "status": "review_outcome"})


def _feedback_type_checked(filters: dict) -> str | None:
    """The ``feedback_type`` filter, None when not given; an unknown type is a 400 (not an empty list that reads as
    "none of those")."""
    feedback_type = filters.get("feedback_type")
    if feedback_type in (None, ""):
        return None
    if feedback_type not in FeedbackType.values:
        raise ApplicationError(f"Unknown feedback type; use one of {', '.join(FeedbackType.values)}.", field="feedback_type")
    return feedback_type


def feedback_record_list(*, agent, filters: dict):
    qs = FeedbackRecord.objects.select_related("action").filter(agent=agent)
    _feedback_type_checked(filters)
    return _filter(qs, filters, {"action": "action__name", "feedback_type": "feedback_type", "status": "pattern__status"})


def mistake_pattern_list(*, agent, filters: dict):
    """The agent's patterns; ``feedback_type``: those grouping records of that type (a pattern is named by the
    records' mistake category when they have one, so its own name does not say; its ``feedback_types`` keep the
    types of records since archived)."""
    qs = MistakePattern.objects.select_related("action").filter(agent=agent)
    feedback_type = _feedback_type_checked(filters)
    if feedback_type is not None:
        qs = qs.filter(feedback_types__contains=[feedback_type])
    return _filter(qs, filters, {"action": "action__name", "status": "status"})


def active_rules_q() -> Q:
    return Q(status=CorrectionRuleStatus.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def active_patterns(*, agent, action) -> list[MistakePattern]:
    """The agent's mistake patterns for an action that warn it, newest first: the active ones, and the mitigated ones
    whose rule still waits for a reviewer (no rule is in force for them yet)."""
    waiting = CorrectionRule.objects.filter(pattern=OuterRef("pk"), status=CorrectionRuleStatus.PENDING)
    in_force = CorrectionRule.objects.filter(active_rules_q(), pattern=OuterRef("pk"))
    return list(
        MistakePattern.objects.filter(agent=agent, action=action)
        .alias(has_waiting=Exists(waiting), has_in_force=Exists(in_force))
        .filter(Q(status=PatternStatus.ACTIVE) | Q(status=PatternStatus.MITIGATED, has_waiting=True, has_in_force=False))
        .order_by("-last_seen")
    )


def active_rules(*, agent, action) -> list[CorrectionRule]:
    """The agent's rules in force for an action, newest first."""
    return list(CorrectionRule.objects.filter(active_rules_q(), agent=agent, action=action).order_by("-created_at"))


OPEN_RULE_STATUSES = [CorrectionRuleStatus.PENDING, CorrectionRuleStatus.ACTIVE]


def patterns_wanting_rule():
    """Active patterns with no rule pending or in force: a new pattern, or one whose mistake recurred after its last
    rule expired (``mistake_patterns_detect`` reopens it) or that a reviewer reopened by hand after deactivating its
    rule. A rule a reviewer deactivated leaves its pattern mitigated, so it is never replaced behind their back."""
    open_rule = CorrectionRule.objects.filter(pattern=OuterRef("pk"), status__in=OPEN_RULE_STATUSES)
    return MistakePattern.objects.filter(status=PatternStatus.ACTIVE).exclude(Exists(open_rule))


def recent_patterns(*, action_id: int, since, limit: int = 10) -> list[dict]:
    """Patterns on an action seen since ``since`` (any agent, not dismissed), as evidence rows."""
    return list(
        MistakePattern.objects.filter(action_id=action_id, last_seen__gte=since)
        .exclude(status=PatternStatus.DISMISSED)
        .order_by("-last_seen")
        .values("id", "agent__name", "category", "occurrence_count", "status", "description")[:limit]
    )


def patterns_by_ids(*, ids: list[int]):
    return MistakePattern.objects.filter(pk__in=ids).select_related("action").order_by("id")


def agent_patterns(*, agent) -> list[MistakePattern]:
    return list(MistakePattern.objects.filter(agent=agent).select_related("action").order_by("status", "-occurrence_count"))


def feedback_record_summary(*, agent, limit: int) -> tuple[int, list[dict], list[FeedbackRecord]]:
    """(count, records per action and type, the latest ``limit`` records) for one agent."""
    qs = FeedbackRecord.objects.filter(agent=agent)
    summary = list(qs.values("action__name", "feedback_type").annotate(n=Count("id")).order_by("action__name", "feedback_type"))
    return qs.count(), summary, list(qs.select_related("action").order_by("-created_at", "-id")[:limit])


_CONFIDENCE_BUCKETS_SQL = """
WITH s AS (
    SELECT action_id, confidence,
           CASE WHEN status = 'completed' AND modified_action IS NULL THEN 1.0 ELSE 0.0 END AS ok
      FROM feedback_proposal
     WHERE agent_id = %(agent)s AND created_at >= %(since)s
           -- a proposal a reviewer corrected was wrong as proposed, as soon as it was corrected (as in outcome rates)
           AND status IN ('completed', 'rejected', 'failed', 'modified')
    UNION ALL
    SELECT action_id, confidence,
           CASE WHEN review_outcome = 'correct' THEN 1.0 WHEN review_outcome = 'incorrect' THEN 0.0
                WHEN success THEN 1.0 ELSE 0.0 END
      FROM feedback_execution
     WHERE agent_id = %(agent)s AND created_at >= %(since)s
)
SELECT GROUPING(action_id) AS overall, action_id, width_bucket(confidence, %(inner)s::float8[]) AS bucket,
       count(*), avg(confidence), avg(ok)
  FROM s
 GROUP BY GROUPING SETS ((action_id, width_bucket(confidence, %(inner)s::float8[])),
                         (width_bucket(confidence, %(inner)s::float8[])))
"""


def outcome_confidence_buckets(*, agent_id: int, since, inner_edges: list[float]) -> list[tuple]:
    """Outcomes of the agent's proposals and executions since ``since`` by confidence bucket, per action and overall:
    rows of (overall, action_id, bucket, count, mean confidence, success share)."""
    with connection.cursor() as cur:
        cur.execute(_CONFIDENCE_BUCKETS_SQL, {"agent": agent_id, "since": since, "inner": inner_edges})
        return cur.fetchall()


_OUTCOME_RATES_SQL = """
WITH s AS (
    SELECT action_id,
           (status = 'completed' AND modified_action IS NULL) AS ok,
           (status = 'rejected' OR modified_action IS NOT NULL) AS rejected
      FROM feedback_proposal
     WHERE action_id = ANY(%(ids)s) AND created_at >= %(since)s
           -- a reviewer's correction is a rejection as soon as it is made, whether or not the agent reports the end
           AND status IN ('completed', 'rejected', 'failed', 'modified')
    UNION ALL
    SELECT action_id,
           (review_outcome = 'correct' OR (review_outcome IS NULL AND success)) AS ok,
           (review_outcome = 'incorrect') AS rejected
      FROM feedback_execution
     WHERE action_id = ANY(%(ids)s) AND created_at >= %(since)s
)
SELECT action_id, count(*), count(*) FILTER (WHERE ok), count(*) FILTER (WHERE rejected)
  FROM s GROUP BY action_id
"""


def outcome_rates(*, action_ids: list[int], since) -> dict[int, tuple[int, int, int]]:
    """Per action: (samples, successes, rejections) of proposals and executions since ``since``: a proposal counts
    once it ended, or once a reviewer rejected or corrected it (a correction is a rejection)."""
    with connection.cursor() as cur:
        cur.execute(_OUTCOME_RATES_SQL, {"ids": action_ids, "since": since})
        return {a: (n, ok, rej) for a, n, ok, rej in cur.fetchall()}


def agent_action_ids(*, agent_id: int, since) -> list[int]:
    """Actions the agent proposed or ran since ``since``."""
    ids: set[int] = set()
    for model in (Proposal, Execution):
        ids.update(
            model.objects.filter(agent_id=agent_id, created_at__gte=since)
            .order_by()
            .values_list("action_id", flat=True)
            .distinct()
        )
    return sorted(ids)


# --- Set-based reads for autonomy cycles over many agents at once ---

_CONFIDENCE_BUCKETS_AGENTS_SQL = """
WITH s AS (
    SELECT agent_id, action_id, confidence,
           CASE WHEN status = 'completed' AND modified_action IS NULL THEN 1.0 ELSE 0.0 END AS ok
      FROM feedback_proposal
     WHERE agent_id = ANY(%(agents)s) AND created_at >= %(since)s
           -- a proposal a reviewer corrected was wrong as proposed, as soon as it was corrected (as in outcome rates)
           AND status IN ('completed', 'rejected', 'failed', 'modified')
    UNION ALL
    SELECT agent_id, action_id, confidence,
           CASE WHEN review_outcome = 'correct' THEN 1.0 WHEN review_outcome = 'incorrect' THEN 0.0
                WHEN success THEN 1.0 ELSE 0.0 END
      FROM feedback_execution
     WHERE agent_id = ANY(%(agents)s) AND created_at >= %(since)s
)
SELECT agent_id, GROUPING(action_id) AS overall, action_id, width_bucket(confidence, %(inner)s::float8[]) AS bucket,
       count(*), avg(confidence), avg(ok)
  FROM s
 GROUP BY GROUPING SETS ((agent_id, action_id, width_bucket(confidence, %(inner)s::float8[])),
                         (agent_id, width_bucket(confidence, %(inner)s::float8[])))
"""


def outcome_confidence_buckets_for_agents(*, agent_ids: list[int], since, inner_edges: list[float]) -> list[tuple]:
    """``outcome_confidence_buckets`` for many agents in one statement:
    rows of (agent_id, overall, action_id, bucket, count, mean confidence, success share)."""
    with connection.cursor() as cur:
        cur.execute(_CONFIDENCE_BUCKETS_AGENTS_SQL, {"agents": list(agent_ids), "since": since, "inner": inner_edges})
        return cur.fetchall()


_AGENTS_ACTIONS_SQL = """
SELECT agent_id, action_id FROM feedback_proposal WHERE agent_id = ANY(%(agents)s) AND created_at >= %(since)s
 UNION
SELECT agent_id, action_id FROM feedback_execution WHERE agent_id = ANY(%(agents)s) AND created_at >= %(since)s
 ORDER BY 1, 2
"""


def agents_action_ids(*, agent_ids: list[int], since) -> dict[int, list[int]]:
    """``agent_action_ids`` for many agents in one statement: agent id -> sorted action ids (agents without any left out)."""
    out: dict[int, list[int]] = {}
    with connection.cursor() as cur:
        cur.execute(_AGENTS_ACTIONS_SQL, {"agents": list(agent_ids), "since": since})
        for agent_id, action_id in cur.fetchall():
            out.setdefault(agent_id, []).append(action_id)
    return out


# --- The review inbox: what waits for a human, and the evidence beside a decision ---


def proposals_waiting():
    return Proposal.objects.filter(status="pending")


def executions_waiting():
    return Execution.objects.filter(review_outcome__isnull=True)


def rules_waiting():
    return CorrectionRule.objects.filter(status=CorrectionRuleStatus.PENDING)


def proposals_by_ids(ids: list[int]):
    return Proposal.objects.filter(pk__in=ids).select_related("agent", "action", "reviewed_by")


def executions_by_ids(ids: list[int]):
    return Execution.objects.filter(pk__in=ids).select_related("agent", "action", "reviewed_by")


def rules_by_ids(ids: list[int]):
    return CorrectionRule.objects.filter(pk__in=ids).select_related("agent", "action", "pattern", "approved_by")


def mistake_categories_in_use(*, limit: int = 50) -> list[str]:
    """The mistake categories reviewers and agents have used, most frequent first (patterns group by them)."""
    return list(
        FeedbackRecord.objects.exclude(mistake_category="")
        .values("mistake_category")
        .annotate(n=Count("id"))
        .order_by("-n", "mistake_category")
        .values_list("mistake_category", flat=True)[:limit]
    )


def action_review_context(*, agent_id: int | None, action_id: int, limit: int = 10) -> dict:
    """For a decision on an action (of one agent, or of every agent when ``agent_id`` is None): its active
    patterns and rules, and its latest outcomes."""
    of_agent = Q(agent_id=agent_id) if agent_id is not None else Q()
    patterns = list(
        MistakePattern.objects.filter(of_agent, action_id=action_id, status=PatternStatus.ACTIVE)
        .select_related("agent")
        .order_by("-last_seen")[:limit]
    )
    rules = list(
        CorrectionRule.objects.filter(of_agent, active_rules_q(), action_id=action_id)
        .select_related("agent")
        .order_by("-created_at")[:limit]
    )
    outcomes = list(
        FeedbackRecord.objects.filter(action_id=action_id)
        .order_by("-created_at", "-id")
        .values("id", "feedback_type", "mistake_category", "human_explanation", "created_at", "agent__name")[:limit]
    )
    return {"patterns": patterns, "rules": rules, "outcomes": outcomes}
