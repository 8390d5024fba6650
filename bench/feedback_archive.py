"""Retention at scale: move the older half of 10,000,000 feedback records to the archive.

``python bench/feedback_archive.py [--records 10000000] [--batch N]``

Records are bulk-inserted with generate_series (1,000 agents, 20 actions, six feedback types, spread over the
last 365 days, so about half are older than FEEDBACK_RECORD_RETENTION_DAYS = 180). Mistake patterns are detected
first. Timed: ``feedback_records_archive`` as the beat task runs it (one short transaction per batch of
FEEDBACK_ARCHIVE_BATCH records). Beside it in the same run, a second connection writes a new feedback record every
20 ms, as the API would, and its latency shows whether the archive holds locks that block writers; the same writer
runs for as long again before the archive as the baseline. Checked: live + archived = loaded, nothing old left
live, pattern counts unchanged.

Last line: RESULT records=.. archived=.. archive_s=.. rows_per_s=.. batch_p95_ms=.. batch_max_ms=..
writer_p50_ms=.. writer_max_ms=.. writer_idle_max_ms=..
"""

import argparse
import threading
import time

import numpy as np
from _common import fresh_database, record, setup_django, table
from tqdm import tqdm

N_AGENTS = 1000
CHUNK = 1_000_000


def writer(stop: threading.Event, latencies: list[float], action_id: int, agent_id: int) -> None:
    """A new feedback record every 20 ms on its own connection (what the API does), timed."""
    from django.db import connection

    try:
        while not stop.is_set():
            started = time.perf_counter()
            with connection.cursor() as cur:
                cur.execute(
                    "INSERT INTO feedback_feedbackrecord (agent_id, action_id, feedback_type, human_explanation, "
                    "agent_confidence, action_context, mistake_category, processed, source, created_at) "
                    "VALUES (%s, %s, 'rejection', 'live write', 0.5, '{}'::jsonb, '', false, 'api', now())",
                    [agent_id, action_id],
                )
            latencies.append((time.perf_counter() - started) * 1000)
            stop.wait(0.02)
    finally:
        connection.close()


def writer_during(seconds: float | None, action_id: int, agent_id: int, work=None):
    """Run the writer for ``seconds`` or while ``work()`` runs; answer (its latencies, work's answer)."""
    stop, latencies = threading.Event(), []
    thread = threading.Thread(target=writer, args=(stop, latencies, action_id, agent_id))
    thread.start()
    try:
        answer = work() if work is not None else time.sleep(seconds)
    finally:
        stop.set()
        thread.join()
    return latencies, answer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=None, help="records per batch (default FEEDBACK_ARCHIVE_BATCH)")
    args = ap.parse_args()
    setup_django(db_name="bench_feedback_archive")
    from _outcomes_data import feedback_records, make_agents_and_actions
    from django.conf import settings
    from django.db import connection

    from feedback.models import FeedbackRecord, FeedbackRecordArchive, MistakePattern
    from feedback.services.mistakes import mistake_patterns_detect
    from feedback.services.retention import feedback_records_archive, feedback_records_to_archive

    fresh_database()
    first_agent = make_agents_and_actions(N_AGENTS)
    started = time.perf_counter()
    with tqdm(total=args.records, desc="feedback records", unit="row") as bar:
        for done in range(0, args.records, CHUNK):
            n = min(CHUNK, args.records - done)
            feedback_records(n, N_AGENTS, first_agent, days=365)
            bar.update(n)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE feedback_feedbackrecord")
    load_s = time.perf_counter() - started
    mistake_patterns_detect()
    patterns_before = list(MistakePattern.objects.order_by("pk").values_list("pk", "occurrence_count"))
    _, old = feedback_records_to_archive()
    action_id = FeedbackRecord.objects.values_list("action_id", flat=True).first()

    idle, _ = writer_during(20.0, action_id, first_agent)
    batch_ms: list[float] = []
    last = [time.perf_counter()]

    def progress(moved: int) -> None:
        now = time.perf_counter()
        batch_ms.append((now - last[0]) * 1000)
        last[0] = now
        bar.update(moved)

    with tqdm(total=old, desc="archiving", unit="row") as bar:
        started = time.perf_counter()
        busy, result = writer_during(
            None,
            action_id,
            first_agent,
            work=lambda: feedback_records_archive(batch_size=args.batch, progress=progress),
        )
        archive_s = time.perf_counter() - started

    live, archived = FeedbackRecord.objects.count(), FeedbackRecordArchive.objects.count()
    written = len(idle) + len(busy)
    # the archive's own cutoff is a little later than the count's: records kept crossing it meanwhile
    assert archived == result.archived >= old, (archived, result.archived, old)
    assert live + archived == args.records + written, (live, archived, args.records, written)
    assert not FeedbackRecord.objects.filter(created_at__lt=result.cutoff).exists()
    assert list(MistakePattern.objects.order_by("pk").values_list("pk", "occurrence_count")) == patterns_before

    def pct(values, q):
        return float(np.percentile(np.array(values), q)) if values else 0.0

    batch = args.batch or settings.FEEDBACK_ARCHIVE_BATCH
    rows = [
        ["load (generate_series)", f"{args.records:,} records", f"{load_s:.1f} s", ""],
        [
            f"archive, batches of {batch:,}",
            f"{archived:,} records older than {settings.FEEDBACK_RECORD_RETENTION_DAYS} days in {result.batches:,} batches",
            f"{archive_s:.1f} s ({archived / archive_s:,.0f} rows/s)",
            f"batch p50 {pct(batch_ms, 50):.0f} ms, p95 {pct(batch_ms, 95):.0f} ms, max {max(batch_ms):.0f} ms",
        ],
        [
            "a writer beside it (baseline: the same writer before the archive)",
            f"{len(busy):,} inserts during, {len(idle):,} before",
            f"p50 {pct(busy, 50):.2f} ms, max {max(busy):.1f} ms",
            f"before: p50 {pct(idle, 50):.2f} ms, max {max(idle):.1f} ms",
        ],
    ]
    body = table(["step", "work", "time", "detail"], rows)
    body += (
        f"\n\nChecked: live ({live:,}) + archived ({archived:,}) = loaded + written beside; no record older than the "
        f"cutoff left live; {len(patterns_before):,} mistake patterns with unchanged counts."
    )
    print(body)
    record(
        "feedback_archive",
        body,
        f"RESULT records={args.records} archived={archived} archive_s={archive_s:.1f} rows_per_s={archived / archive_s:.0f} "
        f"batch_p95_ms={pct(batch_ms, 95):.0f} batch_max_ms={max(batch_ms):.0f} writer_p50_ms={pct(busy, 50):.2f} "
        f"writer_max_ms={max(busy):.1f} writer_idle_max_ms={max(idle):.1f}",
    )


if __name__ == "__main__":
    main()
