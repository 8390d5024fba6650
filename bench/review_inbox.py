"""The review inbox with 10,000 pending items of every kind: page and decision-page latency, queries per page.

Items are bulk-created (4,000 learning candidates, 2,500 proposals, 2,000 executions, 300 autonomy transitions,
500 pending correction rules, 600 quarantined memories, 100 fitted profiles) for 20 agents. A signed-in reviewer
(Django test client, the whole middleware stack: session, tenant scope, CSRF) opens the inbox in four views
(oldest first, riskiest first, one kind, page 20) and the decision page of items of every kind. Queries are
counted at two page sizes: the count must not grow with the page. Baseline in the same run: the admin's own
changelist of proposals over the same data (what a reviewer used before the inbox).

Last line: RESULT inbox_p95_ms=.. decision_p95_ms=.. queries_inbox=..
"""

import statistics
import time

from _common import fresh_database, record, setup_django, table

RUNS = 40
COUNTS = {
    "candidate": 4000,
    "proposal": 2500,
    "execution": 2000,
    "transition": 300,
    "rule": 500,
    "quarantine": 600,
    "profile": 100,
}


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(round(0.95 * len(samples))) - 1)]


def populate() -> None:
    from actions.models import Action
    from agents.models import Agent
    from autonomy.models import AutonomyTransition
    from feedback.models import CorrectionRule, Execution, Proposal
    from learning.models import FittedResolutionProfile, LearningCandidate
    from memories.models import MemoryQuarantine

    agents = Agent.objects.bulk_create(Agent(name=f"agent-{n}") for n in range(20))
    actions = Action.objects.bulk_create(
        Action(name=f"action.{n}", autonomy_level=1 + n % 2) for n in range(COUNTS["transition"])
    )
    LearningCandidate.objects.bulk_create(
        LearningCandidate(
            input_pattern=f"phrase number {n}",
            normalized=f"phrase number {n}",
            suggested_output=f"verb.{n % 77}",
            user_id=None if n % 3 else f"user-{n % 500}",
            source="correction",
            confidence=0.5 + (n % 50) / 100,
            risk_level=("low", "medium", "high")[n % 3],
            proposed_by_agent=agents[n % 20],
        )
        for n in range(COUNTS["candidate"])
    )
    Proposal.objects.bulk_create(
        Proposal(
            agent=agents[n % 20],
            action=actions[n % len(actions)],
            proposed_action={"to": f"user{n}@example.com", "n": n},
            reasoning={"confidence": (n % 100) / 100, "why": "asked"},
            confidence=(n % 100) / 100,
        )
        for n in range(COUNTS["proposal"])
    )
    Execution.objects.bulk_create(
        Execution(
            agent=agents[n % 20],
            action=actions[n % len(actions)],
            params={"n": n},
            reasoning={"why": "asked"},
            confidence=(n % 100) / 100,
            success=bool(n % 4),
        )
        for n in range(COUNTS["execution"])
    )
    AutonomyTransition.objects.bulk_create(
        AutonomyTransition(
            action=a,
            from_level=a.autonomy_level,
            to_level=a.autonomy_level + 1,
            evidence={"success_rate": 0.97, "rejection_rate": 0.01, "sample_size": 40},
            reason="97% success over 40 samples",
        )
        for a in actions
    )
    CorrectionRule.objects.bulk_create(
        CorrectionRule(
            agent=agents[n % 20],
            action=actions[n % len(actions)],
            precondition=f"when case {n}",
            correction={"require_review": True},
            require_review=True,
            status="pending_approval",
        )
        for n in range(COUNTS["rule"])
    )
    MemoryQuarantine.objects.bulk_create(
        MemoryQuarantine(user_id=f"user-{n}", reason="secret", redacted_preview=f"key [REDACTED:aws_key] {n}")
        for n in range(COUNTS["quarantine"])
    )
    FittedResolutionProfile.objects.bulk_create(
        FittedResolutionProfile(
            embedding_model="m",
            resolve_threshold=0.7,
            margin=0.05,
            max_wrong_pct=3.0,
            gold_count=40,
            train_count=30,
            held_out_count=10,
            baseline={"resolve_threshold": 0.69, "margin": 0.045},
            held_out_current={"correct": 80.0, "wrong": 3.0, "asked": 17.0},
            held_out_fitted={"correct": 85.0, "wrong": 2.0, "asked": 13.0},
        )
        for _ in range(COUNTS["profile"])
    )


def timed(client, urls: list[str]) -> list[float]:
    out = []
    for url in urls:
        started = time.perf_counter()
        response = client.get(url)
        out.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return out


def main():
    setup_django(db_name="bench_review_inbox")
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from review.models import Claim, Decision
    from review.selectors import KINDS

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    fresh_database()
    Claim.objects.all().delete()
    Decision.objects.all().delete()
    started = time.perf_counter()
    populate()
    load_s = time.perf_counter() - started
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    user_model = get_user_model()
    user_model.objects.filter(username="bench-reviewer").delete()
    reviewer = user_model.objects.create_superuser("bench-reviewer", password="x")
    client = Client()
    client.force_login(reviewer)

    views = ["/admin/inbox/", "/admin/inbox/?order=risk", "/admin/inbox/?kind=candidate&risk=high", "/admin/inbox/?page=20"]
    timed(client, views)  # warm up
    inbox_ms = timed(client, views * (RUNS // len(views)))

    ids = {kind: list(spec.waiting().order_by("pk").values_list("pk", flat=True)[:RUNS]) for kind, spec in KINDS.items()}
    decision_urls = [f"/admin/inbox/{kind}/{ids[kind][n % len(ids[kind])]}/" for n in range(RUNS) for kind in ids][: RUNS * 2]
    timed(client, decision_urls[: len(KINDS)])
    decision_ms = timed(client, decision_urls)

    queries = {}
    for view in ("/admin/inbox/?kind=candidate", "/admin/inbox/?order=risk"):
        for per_page in (25, 100):
            settings.REVIEW_PAGE_SIZE = per_page
            with CaptureQueriesContext(connection) as ctx:
                assert client.get(view).status_code == 200
            queries[view, per_page] = len(ctx.captured_queries)
    settings.REVIEW_PAGE_SIZE = 50
    one, mixed = "/admin/inbox/?kind=candidate", "/admin/inbox/?order=risk"

    changelist_ms = timed(client, ["/admin/feedback/proposal/"] * 10 + ["/admin/feedback/proposal/?status__exact=pending"] * 10)

    total = sum(COUNTS.values())
    rows = [
        ["load", f"{total:,} pending items", f"{load_s:.1f} s", ""],
        [
            "inbox page (4 views)",
            f"{len(inbox_ms)} requests",
            f"p50 {statistics.median(inbox_ms):.1f} ms",
            f"p95 {p95(inbox_ms):.1f} ms",
        ],
        [
            "decision page (every kind)",
            f"{len(decision_ms)} requests",
            f"p50 {statistics.median(decision_ms):.1f} ms",
            f"p95 {p95(decision_ms):.1f} ms",
        ],
        [
            "queries, one kind",
            "25 items / 100 items",
            f"{queries[one, 25]} / {queries[one, 100]}",
            "same" if queries[one, 25] == queries[one, 100] else "GROWS",
        ],
        [
            "queries, every kind, riskiest first",
            "25 items / 100 items",
            f"{queries[mixed, 25]} / {queries[mixed, 100]}",
            "bounded by the kinds on the page",
        ],
        [
            "baseline: proposals changelist",
            f"{len(changelist_ms)} requests",
            f"p50 {statistics.median(changelist_ms):.1f} ms",
            f"p95 {p95(changelist_ms):.1f} ms",
        ],
    ]
    body = table(["what", "size", "", ""], rows)
    body += (
        "\n\nDjango test client with the full middleware stack (session, tenant scope, CSRF), a superuser reviewer. "
        "Target: inbox and decision page p95 under 300 ms with 10,000 items; the query count must not grow with the page."
    )
    print(body)
    record(
        "review_inbox",
        body,
        f"RESULT inbox_p95_ms={p95(inbox_ms):.1f} decision_p95_ms={p95(decision_ms):.1f} queries_inbox={queries[mixed, 100]}",
    )


if __name__ == "__main__":
    main()
