"""Mistake pattern detection and review."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from common.api import ApplicationError, NotFound
from common.validation import MAX_DAYS
from feedback.models import NEGATIVE_FEEDBACK_TYPES, MistakePattern, PatternStatus
from feedback.services.reviews import _explanation, _pk

logger = logging.getLogger(__name__)

# Advisory lock keys (two int4 keys: namespace, agent id or 0).
LOCK_NAMESPACE_DETECT = 61001

MAX_WINDOW_DAYS = MAX_DAYS


@dataclass
class DetectionResult:
    created: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    linked_records: int = 0

    @property
    def pattern_ids(self) -> list[int]:
        return self.created + self.updated


# A pattern becomes active again when its mistake recurs after a reviewer resolved it, or after its latest correction
# rule expired (a new rule can then be drawn from it), or, mitigated with no rule left at all (a rule deleted), after
# its last change. A rule a reviewer deactivated keeps its pattern mitigated: that was a human decision, which only a
# human reopens (``mistake_pattern_set_status``).
_STATUS_AFTER_SQL = """CASE
           WHEN p.status = 'resolved' AND EXCLUDED.last_seen > p.resolved_at THEN 'active'
           WHEN p.status = 'mitigated' AND EXCLUDED.last_seen > COALESCE((
                SELECT CASE WHEN r.status = 'expired' THEN r.expires_at ELSE 'infinity'::timestamptz END
                  FROM feedback_correctionrule r
                 WHERE r.pattern_id = p.id
                 ORDER BY r.created_at DESC, r.id DESC
                 LIMIT 1), p.updated_at) THEN 'active'
           ELSE p.status END"""

# A pattern's record types only grow: records that left the window (or were archived) were of its types too.
_TYPES_AFTER_SQL = "ARRAY(SELECT DISTINCT t FROM unnest(p.feedback_types || EXCLUDED.feedback_types) t ORDER BY t)"

# One mistake is one proposal or execution, however many records it got (rejected and overridden, or overridden
# twice); a record about neither is one mistake of its own. One integer key a mistake (a residue per kind), which
# counts faster than text.
_MISTAKE = "COALESCE(fr.proposal_id * 3, fr.execution_id * 3 + 1, fr.id * 3 + 2)"

_DETECT_SQL = (
    """
WITH grp AS (
    SELECT fr.agent_id, fr.action_id,
           COALESCE(NULLIF(fr.mistake_category, ''), fr.feedback_type) AS category,
           count(DISTINCT {mistake}) AS n, min(fr.created_at) AS first_seen, max(fr.created_at) AS last_seen,
           array_agg(DISTINCT fr.feedback_type ORDER BY fr.feedback_type) AS types,
           mode() WITHIN GROUP (ORDER BY fr.human_explanation) FILTER (WHERE fr.human_explanation <> '') AS explanation,
           mode() WITHIN GROUP (ORDER BY fr.corrected_action::text) FILTER (WHERE fr.corrected_action IS NOT NULL) AS correction
      FROM feedback_feedbackrecord fr
     WHERE fr.feedback_type = ANY(%(types)s) AND fr.created_at >= %(since)s {agent_filter}
     GROUP BY 1, 2, 3
    HAVING count(DISTINCT {mistake}) >= %(min)s
)
INSERT INTO feedback_mistakepattern AS p
       (agent_id, action_id, category, feedback_types, description, common_explanation, common_correction,
        occurrence_count, first_seen, last_seen, status, resolution_notes, created_at, updated_at)
SELECT g.agent_id, g.action_id, g.category, g.types,
       format('%%s × %%s on %%s in %%s days%%s', g.n, g.category, a.name, %(window)s,
              CASE WHEN g.explanation IS NULL THEN '' ELSE format('; most common explanation: "%%s"', g.explanation) END),
       COALESCE(g.explanation, ''), g.correction::jsonb, g.n, g.first_seen, g.last_seen, 'active', '', now(), now()
  FROM grp g JOIN actions_action a ON a.id = g.action_id
 ORDER BY g.agent_id, g.action_id, g.category
ON CONFLICT (agent_id, action_id, category) DO UPDATE
   SET feedback_types = {types_after},
       description = EXCLUDED.description,
       common_explanation = EXCLUDED.common_explanation,
       common_correction = EXCLUDED.common_correction,
       occurrence_count = EXCLUDED.occurrence_count,
       first_seen = LEAST(p.first_seen, EXCLUDED.first_seen),
       last_seen = GREATEST(p.last_seen, EXCLUDED.last_seen),
       status = {status_after},
       updated_at = now()
 WHERE (p.occurrence_count, p.last_seen, p.description, p.status, p.feedback_types)
       IS DISTINCT FROM (EXCLUDED.occurrence_count, GREATEST(p.last_seen, EXCLUDED.last_seen), EXCLUDED.description,
                         {status_after}, {types_after})
RETURNING p.id, (xmax = 0) AS inserted, p.status
""".replace("{status_after}", _STATUS_AFTER_SQL)
    .replace("{mistake}", _MISTAKE)
    .replace("{types_after}", _TYPES_AFTER_SQL)
)


_LINK_SQL = """
UPDATE feedback_feedbackrecord fr
   SET pattern_id = p.id, processed = true, processed_at = now()
  FROM feedback_mistakepattern p
 WHERE p.agent_id = fr.agent_id AND p.action_id = fr.action_id
   AND p.category = COALESCE(NULLIF(fr.mistake_category, ''), fr.feedback_type)
   AND fr.feedback_type = ANY(%(types)s) AND fr.created_at >= %(since)s
   AND fr.pattern_id IS NULL {agent_filter}
"""

# The link, and the types of the records it linked added to their patterns' ``feedback_types`` in the same statement:
# a record linked to a pattern whose group did not reach the minimum again (the upsert left it alone) is still found
# by a filter on its type. Callers add their final SELECT over ``linked`` (agent_id, pattern_id, feedback_type).
_LINK_WIDEN_SQL = (
    "WITH linked AS ("
    + _LINK_SQL
    + """ RETURNING fr.agent_id, fr.pattern_id, fr.feedback_type),
widened AS (
    UPDATE feedback_mistakepattern p
       SET feedback_types = ARRAY(SELECT DISTINCT t FROM unnest(p.feedback_types || n.types) t ORDER BY t)
      FROM (SELECT pattern_id, array_agg(DISTINCT feedback_type) AS types FROM linked GROUP BY pattern_id) n
     WHERE p.id = n.pattern_id AND NOT (n.types <@ p.feedback_types)
    RETURNING p.id
)
"""
)


def detection_lock(*, agent_ids: list[int] | None) -> None:
    """Until the transaction ends: every agent's patterns (None: exclusive), or these agents' (the namespace shared,
    then each agent's own key in ascending order), so runs that overlap wait instead of deadlocking. Taken again in
    the same transaction, it is held already."""
    with connection.cursor() as cur:
        if agent_ids is None:
            cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", [LOCK_NAMESPACE_DETECT])
            return
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s, 0)", [LOCK_NAMESPACE_DETECT])
        cur.execute(
            "SELECT count(pg_advisory_xact_lock(%s::int4, a)) FROM (SELECT a FROM unnest(%s::int4[]) a ORDER BY a) s",
            [LOCK_NAMESPACE_DETECT, sorted({int(a) for a in agent_ids})],
        )


def mistake_patterns_detect(
    *, agent_id: int | None = None, window_days: int | None = None, min_count: int | None = None
) -> DetectionResult:
    """Group negative feedback by (agent, action, category) in the database; 3+ mistakes (distinct proposals or
    executions, not records) make or update a pattern.

    One INSERT … ON CONFLICT DO UPDATE aggregates with GROUP BY (no Python loop over
    records) and one UPDATE links every contributing record not linked yet (a record's
    agent, action and category never change, so a linked record stays linked right). A resolved pattern, or a
    mitigated one whose latest rule expired (or that has no rule left), becomes active again when the mistake recurs
    after that; one whose rule a reviewer deactivated stays mitigated. Correction rules are drawn under the same lock
    (``detection_lock``), so a detection never reads a pattern's rules from before a rule drawn meanwhile. The unique constraint
    makes a pattern impossible to duplicate; an advisory lock serialises runs that
    overlap (a run for all agents takes it exclusively, runs for one agent share it
    and take their agent's key), so two runs at once wait instead of deadlocking.
    """
    window_days = settings.MISTAKE_WINDOW_DAYS if window_days is None else window_days
    min_count = settings.MISTAKE_MIN_COUNT if min_count is None else min_count
    if isinstance(window_days, bool) or not isinstance(window_days, int) or window_days <= 0:
        raise ApplicationError("The window must be a positive number of days.", field="window_days")
    if window_days > MAX_WINDOW_DAYS:
        raise ApplicationError(f"The window must be at most {MAX_WINDOW_DAYS} days.", field="window_days")
    if window_days >= settings.FEEDBACK_RECORD_RETENTION_DAYS:
        # older records move to the archive: counted from one snapshot, they would be gone when their links are written
        raise ApplicationError(
            f"The window must be shorter than the feedback records' retention (FEEDBACK_RECORD_RETENTION_DAYS, "
            f"{settings.FEEDBACK_RECORD_RETENTION_DAYS} days): older records are archived.",
            field="window_days",
        )
    if not isinstance(min_count, int) or min_count < 1:
        raise ApplicationError("The minimum must be at least 1.", field="min")
    params = {
        "types": list(NEGATIVE_FEEDBACK_TYPES),
        "since": timezone.now() - timedelta(days=window_days),
        "min": min_count,
        "window": window_days,
        "agent": agent_id,
    }
    agent_filter = "AND fr.agent_id = %(agent)s" if agent_id is not None else ""
    result = DetectionResult()
    with transaction.atomic(), connection.cursor() as cur:
        detection_lock(agent_ids=None if agent_id is None else [agent_id])
        cur.execute(_DETECT_SQL.format(agent_filter=agent_filter), params)
        for pk, inserted, _status in cur.fetchall():
            (result.created if inserted else result.updated).append(pk)
        cur.execute(_LINK_WIDEN_SQL.format(agent_filter=agent_filter) + "SELECT count(*) FROM linked", params)
        result.linked_records = cur.fetchone()[0]
    logger.info(
        "mistake detection (agent=%s, %s days, min %s): %s new, %s updated patterns, %s records linked",
        agent_id,
        window_days,
        min_count,
        len(result.created),
        len(result.updated),
        result.linked_records,
    )
    return result


REVIEWER_STATUSES = [PatternStatus.ACTIVE, PatternStatus.RESOLVED, PatternStatus.DISMISSED]


def mistake_pattern_set_status(*, pattern, status: str, notes: str = "", user=None) -> MistakePattern:
    """Reviewers dismiss, resolve or reactivate a pattern, with notes. "Mitigated" is not theirs to set: it says a
    correction rule was drawn from the pattern (``correction_rules_create``); a mitigated pattern may keep it."""
    if status not in PatternStatus.values:
        raise ApplicationError(f"status must be one of {', '.join(REVIEWER_STATUSES)}.", field="status")
    notes = _explanation(notes, "notes")
    with transaction.atomic():
        obj = MistakePattern.objects.select_for_update().filter(pk=_pk(pattern)).first()
        if obj is None:
            raise NotFound(f"Mistake pattern {_pk(pattern)} not found.", field="id")
        if status not in REVIEWER_STATUSES and status != obj.status:
            raise ApplicationError(f"status must be one of {', '.join(REVIEWER_STATUSES)}.", field="status")
        obj.status, obj.resolution_notes = status, notes
        if status in (PatternStatus.RESOLVED, PatternStatus.DISMISSED):
            obj.resolved_by, obj.resolved_at = user, timezone.now()
        obj.save(update_fields=["status", "resolution_notes", "resolved_by", "resolved_at", "updated_at"])
    return obj
