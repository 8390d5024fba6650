"""Mistake detection, correction rules and rule expiry for a set of agents at once (set-based autonomy cycles).

Each function does for many agents in a handful of statements what its per-agent
counterpart in ``mistakes`` / ``rules`` does for one, with the same SQL and the
same locks, and answers per agent what the per-agent call would have answered.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from simple_history.utils import bulk_update_with_history

from feedback.models import NEGATIVE_FEEDBACK_TYPES, CorrectionRule, CorrectionRuleStatus
from feedback.selectors import patterns_wanting_rule
from feedback.services.mistakes import _DETECT_SQL, _LINK_WIDEN_SQL, DetectionResult, detection_lock
from feedback.services.rules import correction_rules_create

logger = logging.getLogger(__name__)

_AGENTS_FILTER = "AND fr.agent_id = ANY(%(agents)s)"
_RETURNING = "RETURNING p.id, (xmax = 0) AS inserted, p.status"
if _RETURNING not in _DETECT_SQL:  # pragma: no cover - guards the reuse of the per-agent statement
    raise ImportError("feedback.services.mistakes._DETECT_SQL changed; update feedback.services.agent_sets")
_DETECT_AGENTS_SQL = _DETECT_SQL.format(agent_filter=_AGENTS_FILTER).replace(
    _RETURNING, "RETURNING p.id, p.agent_id, (xmax = 0) AS inserted"
)
_LINK_AGENTS_SQL = _LINK_WIDEN_SQL.format(agent_filter=_AGENTS_FILTER) + "SELECT agent_id, count(*) FROM linked GROUP BY agent_id"


def mistake_patterns_detect_for_agents(*, agent_ids: list[int]) -> dict[int, DetectionResult]:
    """``mistake_patterns_detect`` for every agent in ``agent_ids``: one upsert, one link update.

    Takes the same advisory locks as per-agent runs (shared namespace lock, then each
    agent's key in ascending order), so it waits for, and never deadlocks with, a
    per-agent or all-agents detection. Answers agent id -> its DetectionResult
    (agents with nothing to report are left out).
    """
    ids = sorted({int(a) for a in agent_ids})
    out: dict[int, DetectionResult] = {}
    if not ids:
        return out
    params = {
        "types": list(NEGATIVE_FEEDBACK_TYPES),
        "since": timezone.now() - timedelta(days=settings.MISTAKE_WINDOW_DAYS),
        "min": settings.MISTAKE_MIN_COUNT,
        "window": settings.MISTAKE_WINDOW_DAYS,
        "agents": ids,
    }
    with transaction.atomic(), connection.cursor() as cur:
        detection_lock(agent_ids=ids)
        cur.execute(_DETECT_AGENTS_SQL, params)
        for pk, agent_id, inserted in sorted(cur.fetchall()):
            r = out.setdefault(agent_id, DetectionResult())
            (r.created if inserted else r.updated).append(pk)
        cur.execute(_LINK_AGENTS_SQL, params)
        for agent_id, n in cur.fetchall():
            out.setdefault(agent_id, DetectionResult()).linked_records = n
    logger.info(
        "mistake detection for %s agent(s): %s pattern(s) new or updated", len(ids), sum(len(r.pattern_ids) for r in out.values())
    )
    return out


def correction_rules_create_for_agents(*, agent_ids: list[int], user=None) -> dict[int, list[CorrectionRule]]:
    """``correction_rules_create`` for every agent in ``agent_ids`` (one call over their patterns): agent id -> rules."""
    pattern_ids = list(patterns_wanting_rule().filter(agent_id__in=list(agent_ids)).order_by("id").values_list("pk", flat=True))
    out: dict[int, list[CorrectionRule]] = {}
    if not pattern_ids:
        return out
    for rule in correction_rules_create(pattern_ids=pattern_ids, user=user):
        out.setdefault(rule.agent_id, []).append(rule)
    return out


def correction_rules_expire_for_agents(*, agent_ids: list[int]) -> dict[int, int]:
    """``correction_rules_expire`` for every agent in ``agent_ids`` (one bulk update with history): agent id -> count."""
    with transaction.atomic():
        rules = list(
            CorrectionRule.objects.select_for_update()
            .filter(
                agent_id__in=list(agent_ids),
                status__in=[CorrectionRuleStatus.ACTIVE, CorrectionRuleStatus.PENDING],
                expires_at__lte=timezone.now(),
            )
            .order_by("id")
        )
        if not rules:
            return {}
        for rule in rules:
            rule.status = CorrectionRuleStatus.EXPIRED
        bulk_update_with_history(rules, CorrectionRule, ["status"], default_change_reason="expired")
    out: dict[int, int] = {}
    for rule in rules:
        out[rule.agent_id] = out.get(rule.agent_id, 0) + 1
    return out
