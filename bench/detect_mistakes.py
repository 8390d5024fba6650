"""Repeated-mistake detection over 1,000,000 feedback records from 1,000 agents (issue 6).

Records are bulk-inserted with generate_series (20 actions, six feedback types,
half with a mistake category, the last 25 days). Timed: the first detection
(creates the patterns and links every contributing record), a second run with
nothing new (idempotent: updates nothing), and one agent's detection (what a
learning cycle does). Baseline in the same run: the same grouping done with a
Python loop over the rows (streamed from the database), which is what
"database-side aggregation rather than Python loops" is measured against.

Last line: RESULT detect_s=..
"""

import time
from collections import Counter

from _common import fresh_database, record, setup_django, table

setup_django(db_name="bench_detect_mistakes")

from _outcomes_data import feedback_records, make_agents_and_actions  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from feedback.models import NEGATIVE_FEEDBACK_TYPES, FeedbackRecord, MistakePattern  # noqa: E402
from feedback.services import mistake_patterns_detect  # noqa: E402

N_RECORDS = 1_000_000
N_AGENTS = 1_000


def python_loop_baseline() -> tuple[float, int]:
    since = timezone.now() - timezone.timedelta(days=30)
    started = time.perf_counter()
    groups: Counter = Counter()
    rows = (FeedbackRecord.objects.filter(feedback_type__in=NEGATIVE_FEEDBACK_TYPES, created_at__gte=since)
            .values_list("agent_id", "action_id", "mistake_category", "feedback_type").iterator(chunk_size=20_000))
    for agent_id, action_id, category, ftype in rows:
        groups[(agent_id, action_id, category or ftype)] += 1
    patterns = sum(1 for n in groups.values() if n >= 3)
    return time.perf_counter() - started, patterns


def main():
    fresh_database()
    started = time.perf_counter()
    first = make_agents_and_actions(N_AGENTS)
    feedback_records(N_RECORDS, N_AGENTS, first)
    load_s = time.perf_counter() - started
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE feedback_feedbackrecord") if not connection.in_atomic_block else None

    t0 = time.perf_counter()
    result = mistake_patterns_detect()
    detect_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = mistake_patterns_detect()
    rerun_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mistake_patterns_detect(agent_id=first + 7)
    one_agent_ms = (time.perf_counter() - t0) * 1000
    baseline_s, baseline_patterns = python_loop_baseline()

    patterns = MistakePattern.objects.count()
    linked = FeedbackRecord.objects.filter(pattern__isnull=False).count()
    assert patterns == len(result.created) == baseline_patterns, (patterns, len(result.created), baseline_patterns)
    assert again.pattern_ids == [], "a second run with nothing new must not change patterns"
    rows = [
        ["load 1,000,000 records (generate_series)", f"{load_s:.1f} s", ""],
        ["detect, all agents (first run: create + link)", f"{detect_s:.2f} s", f"{patterns:,} patterns, {linked:,} records linked"],
        ["detect again, nothing new", f"{rerun_s:.2f} s", f"{len(again.pattern_ids)} changed"],
        ["detect, one agent (~1,000 records)", f"{one_agent_ms:.1f} ms", ""],
        ["baseline: Python loop grouping only (no writes)", f"{baseline_s:.2f} s", f"{baseline_patterns:,} groups >= 3"],
    ]
    body = table(["step", "time", "result"], rows)
    body += ("\n\nDetection is one INSERT … SELECT … GROUP BY … ON CONFLICT DO UPDATE plus one UPDATE … FROM that links records; "
             "the baseline only streams and counts the rows in Python and writes nothing.")
    print(body)
    record("detect_mistakes (issue 6)", body, f"RESULT detect_s={detect_s:.2f}")


if __name__ == "__main__":
    main()
