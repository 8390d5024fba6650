"""Calibration buckets, ECE against a hand-computed example and a reference implementation, EMA, admin diagram."""

from datetime import timedelta

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.calibration import ema
from autonomy.services import calibration_compute
from common.api import ApplicationError, NotFound
from feedback.models import Execution, Proposal

pytestmark = pytest.mark.django_db


def add_proposals(agent, action, confidence, successes, failures, failed_status="rejected"):
    rows = [
        Proposal(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=confidence, status="completed")
        for _ in range(successes)
    ]
    rows += [
        Proposal(agent=agent, action=action, proposed_action={}, reasoning={}, confidence=confidence, status=failed_status)
        for _ in range(failures)
    ]
    Proposal.objects.bulk_create(rows)


@pytest.fixture
def data(db):
    """A constructed data set with known answers (default buckets 0-.5, .5-.7, .7-.9, .9-1, min 10 per bucket)."""
    agent = Agent.objects.create(name="cal")
    send = Action.objects.create(name="email.send")
    crm = Action.objects.create(name="crm.update")
    add_proposals(agent, send, 0.95, 8, 12)  # bucket .9-1: n=20, conf .95, success .40, gap +.55
    add_proposals(agent, crm, 0.8, 8, 2, "failed")  # bucket .7-.9: n=10, conf .80, success .80, gap 0
    add_proposals(agent, send, 0.6, 5, 0)  # bucket .5-.7: n=5 < 10: shown, not counted
    Execution.objects.bulk_create(  # bucket 0-.5: n=10, conf .30, success .60, gap -.30
        [Execution(agent=agent, action=crm, confidence=0.3, success=True) for _ in range(4)]  # unreviewed ok: success
        + [Execution(agent=agent, action=crm, confidence=0.3, success=True, review_outcome="correct") for _ in range(2)]
        + [Execution(agent=agent, action=crm, confidence=0.3, success=True, review_outcome="incorrect") for _ in range(3)]
        + [Execution(agent=agent, action=crm, confidence=0.3, success=False)]
    )
    Proposal.objects.create(agent=agent, action=send, proposed_action={}, reasoning={}, confidence=0.99)  # pending: ignored
    old = Proposal.objects.create(agent=agent, action=send, proposed_action={}, reasoning={}, confidence=0.99, status="rejected")
    Proposal.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=31))  # outside the window
    return agent


def reference_ece(conf, ok, edges, min_samples):
    """A plain reference implementation over the raw samples."""
    conf, ok = np.asarray(conf), np.asarray(ok, dtype=float)
    idx = np.clip(np.digitize(conf, edges[1:-1]), 0, len(edges) - 2)
    total, acc = 0, 0.0
    for b in range(len(edges) - 1):
        m = idx == b
        if m.sum() >= min_samples:
            total += m.sum()
            acc += m.sum() * abs(conf[m].mean() - ok[m].mean())
    return acc / total


def test_buckets_and_ece_match_the_hand_computed_answer(data):
    records = calibration_compute(agent_id=data.pk)
    overall = records[0]
    assert overall.action_id is None and overall.window_days == 30
    b = {(x["low"], x["high"]): x for x in overall.buckets}
    assert b[(0.9, 1.0)] == {
        "low": 0.9,
        "high": 1.0,
        "count": 20,
        "mean_confidence": 0.95,
        "success_rate": 0.4,
        "gap": 0.55,
        "counted": True,
    }
    assert (b[(0.7, 0.9)]["count"], b[(0.7, 0.9)]["success_rate"], b[(0.7, 0.9)]["gap"]) == (10, 0.8, 0.0)
    assert (b[(0.5, 0.7)]["count"], b[(0.5, 0.7)]["counted"]) == (5, False)
    assert (b[(0.0, 0.5)]["count"], b[(0.0, 0.5)]["success_rate"], b[(0.0, 0.5)]["gap"]) == (10, 0.6, -0.3)
    # ECE = (20*.55 + 10*0 + 10*.30) / 40 = 0.35
    assert overall.ece == pytest.approx(0.35)
    assert overall.sample_count == 40 and overall.total_samples == 45
    assert overall.mean_confidence == pytest.approx((20 * 0.95 + 10 * 0.8 + 10 * 0.3) / 40)
    assert overall.mean_success == pytest.approx((8 + 8 + 6) / 40)
    assert overall.overconfidence_rate == pytest.approx(0.5) and overall.underconfidence_rate == pytest.approx(0.25)
    # raw = 0.55 - 0.75 = -0.20, capped at -0.15; first run: no smoothing history
    assert overall.raw_adjustment == pytest.approx(-0.15) and overall.recommended_adjustment == pytest.approx(-0.15)
    conf = [0.95] * 20 + [0.8] * 10 + [0.6] * 5 + [0.3] * 10
    ok = [1] * 8 + [0] * 12 + [1] * 8 + [0] * 2 + [1] * 5 + [1] * 6 + [0] * 4
    assert overall.ece == pytest.approx(reference_ece(conf, ok, [0, 0.5, 0.7, 0.9, 1.0], 10))
    per_action = {r.action.name: r for r in records[1:]}
    assert set(per_action) == {"email.send", "crm.update"}
    assert per_action["email.send"].ece == pytest.approx(0.55)  # only its .9-1 bucket counts
    assert per_action["crm.update"].ece == pytest.approx((10 * 0 + 10 * 0.3) / 20)


def test_one_aggregate_query_per_agent(data):
    with CaptureQueriesContext(connection) as ctx:
        calibration_compute(agent_id=data.pk)
    reads = [q["sql"] for q in ctx.captured_queries if "feedback_proposal" in q["sql"] or "feedback_execution" in q["sql"]]
    assert len(reads) == 1 and "GROUPING SETS" in reads[0]


def test_adjustment_is_ema_smoothed_and_capped(data, settings):
    calibration_compute(agent_id=data.pk)
    # the agent becomes well calibrated: raw adjustment 0, smoothed toward it instead of jumping
    Proposal.objects.all().delete()
    Execution.objects.all().delete()
    add_proposals(data, Action.objects.get(name="email.send"), 0.95, 19, 1)
    add_proposals(data, Action.objects.get(name="crm.update"), 0.8, 16, 4)
    second = calibration_compute(agent_id=data.pk)[0]
    assert second.ece == pytest.approx((20 * 0.0 + 20 * 0.0) / 40) and second.raw_adjustment == 0.0
    assert second.recommended_adjustment == pytest.approx(0.7 * -0.15)
    assert ema(-0.15, 0.0, alpha=0.3, cap=0.15) == pytest.approx(-0.105)
    assert ema(0.14, 0.15, alpha=0.3, cap=0.15) == pytest.approx(0.143)
    assert ema(None, -0.4, alpha=0.3, cap=0.15) == -0.15


def test_small_samples_and_bad_input(db):
    agent = Agent.objects.create(name="new")
    r = calibration_compute(agent_id=agent.pk)[0]
    assert r.ece is None and r.sample_count == 0 and r.recommended_adjustment == 0.0
    with pytest.raises(ApplicationError):
        calibration_compute(agent_id=agent.pk, window_days=0)
    with pytest.raises(NotFound):
        calibration_compute(agent_id=999999)


def test_reliability_diagram_page_renders_with_data(data, client):
    records = calibration_compute(agent_id=data.pk)
    add_proposals(data, Action.objects.get(name="email.send"), 0.6, 1, 0)  # new evidence: a second record
    calibration_compute(agent_id=data.pk)
    user = User.objects.create_superuser("boss", "boss@example.com", "pw-1234-xyz")
    client.force_login(user)
    r = client.get(f"/admin/autonomy/calibrationrecord/{records[0].pk}/change/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="reliability-diagram"' in html and 'id="ece-trend"' in html
    assert "autonomy/vendor/chart-4.6.1.umd.min.js" in html
    chart = r.context["chart_data"]
    assert {b["label"]: (b["x"], b["y"]) for b in chart["buckets"]}["0.9–1.0"] == (0.95, 0.4)
    assert len(chart["trend"]) == 2 and chart["trend"][0]["y"] == pytest.approx(0.35)
    assert '"calibration-chart-data"' in html
    assert client.get("/admin/autonomy/calibrationrecord/").status_code == 200


def test_vendored_chartjs_is_there_with_its_licence():
    from pathlib import Path

    base = Path(__file__).resolve().parent.parent / "autonomy" / "static" / "autonomy" / "vendor"
    js = (base / "chart-4.6.1.umd.min.js").read_text()
    assert js.startswith("/*!\n * Chart.js v4.6.1") and len(js) > 100_000
    assert "MIT License" in (base / "chart.js-LICENSE.md").read_text()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_reliability_diagram_draws_in_a_browser(live_server, browser_page):
    """Chart.js (vendored) really draws both charts from the page's data, with no script errors."""
    agent = Agent.objects.create(name="cal-browser")
    send = Action.objects.create(name="email.send")
    add_proposals(agent, send, 0.95, 8, 12)
    add_proposals(agent, send, 0.8, 8, 2)
    record = calibration_compute(agent_id=agent.pk)[0]
    add_proposals(agent, send, 0.6, 1, 0)  # new evidence: a second record
    calibration_compute(agent_id=agent.pk)
    User.objects.create_superuser("boss", "boss@example.com", "pw-1234-xyz")
    page = browser_page
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/admin/login/?next=/admin/autonomy/calibrationrecord/{record.pk}/change/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", "pw-1234-xyz")
    page.press("#id_password", "Enter")
    page.wait_for_selector("#reliability-diagram")
    page.wait_for_function("window.Chart && Chart.getChart(document.getElementById('ece-trend'))")
    points = page.evaluate("Chart.getChart(document.getElementById('reliability-diagram')).data.datasets[1].data.length")
    trend = page.evaluate("Chart.getChart(document.getElementById('ece-trend')).data.datasets[0].data")
    assert points == 2 and len(trend) == 2 and trend[0] == pytest.approx(record.ece, abs=1e-4)
    assert errors == []


def test_a_proposal_a_reviewer_corrected_is_a_miss_of_the_confidence_the_agent_stated():
    """As autonomy's outcome rates count it: corrected is wrong as proposed, whether or not the corrected action then
    completed, and from the moment it was corrected."""
    from feedback.selectors import outcome_rates
    from feedback.services.reviews import proposal_modify, proposal_outcome_record
    from tests.conftest import REVIEWER, make_proposal

    agent = Agent.objects.create(name="cal")
    for i in range(20):
        p = make_proposal(agent, confidence=0.95)
        proposal_modify(proposal=p, reviewer=REVIEWER, modified_action={"to": "someone-else@example.com"})
        if i % 2:
            proposal_outcome_record(agent=agent, proposal_id=p.pk, success=True)
    send = Action.objects.get(name="email.send")
    assert outcome_rates(action_ids=[send.pk], since=timezone.now() - timedelta(days=30))[send.pk] == (20, 0, 20)
    top = [b for b in calibration_compute(agent_id=agent.pk)[0].buckets if b["low"] == 0.9][0]
    assert top["count"] == 20 and top["success_rate"] == 0.0, top
