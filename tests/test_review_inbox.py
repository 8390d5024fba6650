"""The review inbox: one queue of every kind that waits, decision pages with evidence, claims, confirmations."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.models import Action
from agents.services import agent_key_create
from autonomy.models import AutonomyTransition
from feedback.models import CorrectionRule, Execution, FeedbackRecord, Proposal
from learning.models import FittedResolutionProfile, LearnedPhrase, LearningCandidate, Verb
from learning.services.candidates import candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from memories.models import MemoryQuarantine
from review.models import Claim, Decision
from review.selectors import InboxFilters, inbox_page
from tenants.services import membership_add, tenant_create
from tests.conftest import CBU_CATALOGUE, fill_history, reviewer_user

pytestmark = pytest.mark.django_db

ALL_PERMS = (
    "view_learningcandidate",
    "review_learningcandidate",
    "view_proposal",
    "change_proposal",
    "view_execution",
    "change_execution",
    "view_autonomytransition",
    "approve_autonomytransition",
    "view_correctionrule",
    "approve_correctionrule",
    "view_memoryquarantine",
    "change_memoryquarantine",
    "view_fittedresolutionprofile",
    "change_fittedresolutionprofile",
)


def mixed_inbox(agent_name="agent-a"):
    """One waiting item of every kind; the candidate conflicts with two users' confirmed phrases."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    key, _ = agent_key_create(agent_name=agent_name, scopes=["resolve", "feedback"])
    agent = key.agent
    delete = Verb.objects.get(name="cbu.delete")
    for user in ("ann", "ben"):
        learned_phrase_upsert(phrase="drop the unit", verb=delete, user_id=user, source="confirmation")
    items = {}
    items["candidate"] = candidate_record(
        input_pattern="drop the unit", suggested_output="cbu.show", user_id=None, source="correction", confidence=0.6
    )
    email = Action.objects.create(name="email.send", autonomy_level=1)
    deploy = Action.objects.create(name="deploy.run", autonomy_level=2)
    items["proposal"] = Proposal.objects.create(
        agent=agent, action=email, proposed_action={"to": "ceo@example.com"}, reasoning={"confidence": 0.4}, confidence=0.4
    )
    items["execution"] = Execution.objects.create(
        agent=agent, action=deploy, params={"env": "staging"}, reasoning={"why": "asked"}, confidence=0.9, success=False
    )
    fill_history(email, agent, completed=40)  # the evidence the promotion is checked against when approved
    items["transition"] = AutonomyTransition.objects.create(
        action=email,
        from_level=1,
        to_level=2,
        evidence={"success_rate": 0.97, "rejection_rate": 0.01, "sample_size": 40},
        reason="97% success over 40 samples",
    )
    items["rule"] = CorrectionRule.objects.create(
        agent=agent,
        action=email,
        precondition="when emailing executives",
        correction={"require_review": True},
        require_review=True,
        status="pending_approval",
    )
    items["quarantine"] = MemoryQuarantine.objects.create(
        user_id="ann", reason="secret", redacted_preview="The key is [REDACTED:aws_key]", finding_kinds=["aws_key"]
    )
    items["profile"] = FittedResolutionProfile.objects.create(
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
    return agent, items


def signed_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def inbox():
    return mixed_inbox()


def test_every_kind_waits_in_one_list_with_counts_on_the_admin_index(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    page = client.get("/admin/inbox/")
    assert page.status_code == 200
    data = page.context["data"]
    assert data["total"] == 7 and all(n == 1 for n in data["counts"].values())
    assert {i.kind for i in data["items"]} == set(items)
    assert [i.created_at for i in data["items"]] == sorted(i.created_at for i in data["items"])  # oldest first
    index = client.get("/admin/").content.decode()
    assert 'id="waiting-total">7<' in index
    for kind in items:
        assert f'class="waiting-{kind}">1<' in index


def test_filters_by_kind_risk_and_agent_and_orders_riskiest_first(inbox):
    rita = reviewer_user("rita", *ALL_PERMS)
    riskiest = inbox_page(user=rita, filters=InboxFilters(order="risk"))["items"]
    assert [i.risk for i in riskiest] == sorted((i.risk for i in riskiest), reverse=True)
    assert riskiest[0].risk == 2
    high = inbox_page(user=rita, filters=InboxFilters(min_risk=2))
    assert {i.kind for i in high["items"]} == {"proposal", "execution", "transition", "quarantine"}
    only = inbox_page(user=rita, filters=InboxFilters(kinds=["rule", "profile"]))
    assert {i.kind for i in only["items"]} == {"rule", "profile"}
    by_agent = inbox_page(user=rita, filters=InboxFilters(agent="agent-a"))
    assert {i.kind for i in by_agent["items"]} == {"proposal", "execution", "rule"}  # the candidate came from no agent


def test_a_reviewer_sees_only_kinds_they_may_view():
    mixed_inbox()
    tom = reviewer_user("tom", "view_proposal", "change_proposal")
    data = signed_in(tom).get("/admin/inbox/").context["data"]
    assert set(data["counts"]) == {"proposal"} and data["total"] == 1
    assert signed_in(tom).get(f"/admin/inbox/transition/{AutonomyTransition.objects.get().pk}/").status_code == 404


def test_a_conflicting_candidate_needs_the_acknowledgement_then_a_confirmation(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    url = f"/admin/inbox/candidate/{items['candidate'].pk}/"
    page = client.get(url)
    body = page.content.decode()
    assert 'id="conflict-warning"' in body and "cbu.delete" in body and "ann" in body
    refused = client.post(url, {"action": "approve", "confirmed": "1"})
    assert refused.status_code == 400
    assert "acknowledge the conflict" in refused.content.decode()
    asked = client.post(url, {"action": "approve", "acknowledged": "1"})
    assert asked.status_code == 200 and 'id="change-statement"' in asked.content.decode()
    assert "for every user of this tenant" in asked.content.decode()
    assert LearningCandidate.objects.get(pk=items["candidate"].pk).status == "pending"  # nothing yet
    done = client.post(url, {"action": "approve", "acknowledged": "1", "confirmed": "1"})
    assert done.status_code == 302 and "/admin/inbox/" in done["Location"]
    candidate = LearningCandidate.objects.get(pk=items["candidate"].pk)
    assert candidate.status == "applied" and candidate.reviewed_by == rita
    assert LearnedPhrase.objects.filter(normalized="drop the unit", user_id__isnull=True, verb__name="cbu.show").exists()
    decision = Decision.objects.get(kind="candidate", object_id=candidate.pk)
    assert decision.user == rita and decision.verdict == "approve" and "every user" in decision.summary


def test_the_transition_confirmation_names_the_action_and_both_levels(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    url = f"/admin/inbox/transition/{items['transition'].pk}/"
    asked = client.post(url, {"action": "approve"})
    statement = asked.content.decode()
    assert "Autonomy of email.send changes from level 1 to level 2." in statement
    assert Action.objects.get(name="email.send").autonomy_level == 1
    client.post(url, {"action": "approve", "confirmed": "1", "reason": "good record"})
    assert Action.objects.get(name="email.send").autonomy_level == 2
    assert AutonomyTransition.objects.get(pk=items["transition"].pk).decided_by == rita


def test_deciding_needs_the_kinds_permission(inbox):
    _, items = inbox
    viewer = reviewer_user("vera", "view_autonomytransition")
    response = signed_in(viewer).post(
        f"/admin/inbox/transition/{items['transition'].pk}/", {"action": "approve", "confirmed": "1"}
    )
    assert response.status_code == 403
    assert Action.objects.get(name="email.send").autonomy_level == 1


def test_a_rejection_keeps_the_mistake_category_patterns_are_built_from(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    signed_in(rita).post(
        f"/admin/inbox/proposal/{items['proposal'].pk}/",
        {"action": "reject", "category": "wrong_target", "reason": "never email the CEO"},
    )
    proposal = Proposal.objects.get(pk=items["proposal"].pk)
    assert proposal.status == "rejected"
    record = FeedbackRecord.objects.get(proposal=proposal)
    assert record.mistake_category == "wrong_target" and record.created_by == rita


def test_opening_an_item_claims_it_and_others_cannot_decide_it_meanwhile(inbox, settings):
    _, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    url = f"/admin/inbox/proposal/{items['proposal'].pk}/"
    assert 'id="claim-note"' in signed_in(rita).get(url).content.decode()
    seen = signed_in(sam).get(url).content.decode()
    assert 'id="held-note"' in seen and "rita holds this item" in seen and 'id="btn-approve"' not in seen
    refused = signed_in(sam).post(url, {"action": "approve"})
    assert refused.status_code == 409 and "rita holds this item" in refused.content.decode()
    assert Proposal.objects.get(pk=items["proposal"].pk).status == "pending"
    listed = inbox_page(user=sam, filters=InboxFilters(kinds=["proposal"]))["items"][0]
    assert listed.claim_user == "rita"
    Claim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # claims expire by themselves
    assert 'id="claim-note"' in signed_in(sam).get(url).content.decode()
    assert signed_in(sam).post(url, {"action": "approve"}).status_code == 302
    assert Proposal.objects.get(pk=items["proposal"].pk).reviewed_by == sam


def test_a_lost_race_says_who_decided_and_when(inbox):
    _, items = inbox
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    url = f"/admin/inbox/execution/{items['execution'].pk}/"
    signed_in(rita).post(url, {"action": "reject", "category": "unsafe"})
    late = signed_in(sam).post(url, {"action": "approve"})
    assert late.status_code == 409
    body = late.content.decode()
    assert "Already decided: rejected by rita at" in body
    assert Execution.objects.get(pk=items["execution"].pk).review_outcome == "incorrect"


def test_skip_moves_on_and_a_decision_opens_the_next_item(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    client.get("/admin/inbox/?kind=proposal&kind=execution")
    first = f"/admin/inbox/proposal/{items['proposal'].pk}/"
    nxt = client.post(first, {"action": "skip"})
    assert nxt["Location"] == f"/admin/inbox/execution/{items['execution'].pk}/"
    assert not Claim.objects.filter(kind="proposal").exists()
    last = client.post(nxt["Location"], {"action": "approve"})
    assert last["Location"] == "/admin/inbox/"  # the skipped proposal is not offered again in this pass


def test_variants_a_user_applies_alone_never_wait_for_a_human(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    rita = reviewer_user("rita", *ALL_PERMS)
    candidate_record(
        input_pattern="cbus please", suggested_output="cbu.list", user_id="ann", source="generated_variant", confidence=0.8
    )
    candidate_record(
        input_pattern="cbus please", suggested_output="cbu.list", user_id=None, source="user_disambiguation", confidence=0.9
    )
    kinds = inbox_page(user=rita, filters=InboxFilters())["items"]
    assert [(i.kind, i.title) for i in kinds] == [("candidate", "“cbus please” → cbu.list")]
    assert LearningCandidate.objects.filter(status="pending").count() == 2


def test_reviewers_see_only_their_tenants_items():
    mixed_inbox()
    other = tenant_create(slug="acme", name="Acme")
    olga = reviewer_user("olga", *ALL_PERMS)
    olga.tenant_memberships.all().delete()
    membership_add(user=olga, tenant=other)
    client = signed_in(olga)
    assert client.get("/admin/inbox/").context["data"]["total"] == 0
    assert client.get(f"/admin/inbox/proposal/{Proposal.objects.get(status='pending').pk}/").status_code == 404


def test_the_inbox_costs_the_same_queries_whatever_the_page_size(inbox):
    agent, _ = inbox
    email = Action.objects.get(name="email.send")
    Proposal.objects.bulk_create(
        Proposal(agent=agent, action=email, proposed_action={"n": n}, reasoning={"confidence": 0.9}, confidence=0.9)
        for n in range(60)
    )
    LearningCandidate.objects.bulk_create(
        LearningCandidate(
            input_pattern=f"phrase {n}", normalized=f"phrase {n}", suggested_output="cbu.list", proposed_by_agent=agent
        )
        for n in range(60)
    )
    rita = reviewer_user("rita", *ALL_PERMS)
    counts, views = [], []
    client = signed_in(rita)
    inbox_page(user=rita, filters=InboxFilters())  # loads the user's permissions once
    for per_page in (10, 100):  # both pages show every kind (the oldest items are one of each)
        with CaptureQueriesContext(connection) as ctx:
            page = inbox_page(user=rita, filters=InboxFilters(), per_page=per_page)
        assert len(page["items"]) == per_page
        counts.append(len(ctx.captured_queries))
        with override_settings(REVIEW_PAGE_SIZE=per_page), CaptureQueriesContext(connection) as ctx:
            assert client.get("/admin/inbox/").status_code == 200
        views.append(len(ctx.captured_queries))
    assert counts[0] == counts[1] and views[0] == views[1]


def test_every_kinds_decision_page_shows_its_evidence_without_raw_json(inbox):
    _, items = inbox
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    expected = {
        "candidate": "Interactions that produced it",
        "proposal": "Active mistake patterns",
        "execution": "Recent outcomes",
        "transition": "rates-data",
        "rule": "when emailing executives",
        "quarantine": "[REDACTED:aws_key]",
        "profile": "held out: right %",
    }
    for kind, obj in items.items():
        page = client.get(f"/admin/inbox/{kind}/{obj.pk}/")
        body = page.content.decode()
        assert page.status_code == 200, kind
        assert expected[kind] in body, kind
        assert "{&quot;" not in body and '{"' not in body.split('id="rates-data"')[0].split("<body")[-1], kind


# --- in a browser --------------------------------------------------------------------------------------------

SCREENS = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs" / "screens"


@pytest.fixture
def chromium(monkeypatch):
    import os

    from django.db import connections

    from tests.conftest import CHROMIUM, CHROMIUM_ARGS

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        connections.close_all()
    connections.close_all()


def _login(browser, live_server, username):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/inbox/")
    page.fill("#id_username", username)
    page.fill("#id_password", "s3cret-pass")
    page.press("#id_password", "Enter")
    page.wait_for_selector("#review-inbox")
    return page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_a_reviewer_works_through_every_kind_by_keyboard(one_day, live_server, chromium):
    mixed_inbox()
    reviewer_user("rita", *ALL_PERMS, password="s3cret-pass")
    page = _login(chromium, live_server, "rita")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / "inbox.png"), full_page=True)
    assert page.locator("#inbox-total").inner_text() == "7"
    page.keyboard.press("Enter")  # the oldest item
    decided = []
    for _ in range(7):
        page.wait_for_selector("#review-decide")
        kind = page.locator("#review-decide").get_attribute("data-kind")
        if kind == "candidate":
            page.screenshot(path=str(SCREENS / "decide_candidate.png"), full_page=True)
        decided.append(kind)
        if kind in ("transition", "rule", "profile"):
            page.keyboard.press("a")
            page.wait_for_selector("#change-statement")
            if kind == "transition":
                assert "Autonomy of email.send changes from level 1 to level 2" in page.locator("#change-statement").inner_text()
                page.screenshot(path=str(SCREENS / "confirm_transition.png"), full_page=True)
            with page.expect_navigation():
                page.keyboard.press("c")
        else:
            with page.expect_navigation():
                page.keyboard.press("r")
    page.wait_for_selector("#review-inbox")
    assert sorted(decided) == sorted(["candidate", "proposal", "execution", "transition", "rule", "quarantine", "profile"])
    assert Decision.objects.count() == 7
    assert page.locator("#inbox-total").inner_text() == "0"
    assert page.locator("#done-today").inner_text() == "7"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_a_second_reviewer_sees_the_claim_and_cannot_decide(live_server, chromium):
    _, items = mixed_inbox()
    for name in ("rita", "sam"):
        reviewer_user(name, *ALL_PERMS, password="s3cret-pass")
    rita, sam = _login(chromium, live_server, "rita"), _login(chromium, live_server, "sam")
    url = f"{live_server.url}/admin/inbox/proposal/{items['proposal'].pk}/"
    rita.goto(url)
    rita.wait_for_selector("#claim-note")
    sam.goto(url)
    assert "rita holds this item" in sam.locator("#held-note").inner_text()
    assert sam.locator("#btn-approve").count() == 0
    sam.keyboard.press("a")  # no button: nothing happens
    sam.screenshot(path=str(SCREENS / "claimed.png"), full_page=True)
    assert Proposal.objects.get(pk=items["proposal"].pk).status == "pending"
    with rita.expect_navigation():
        rita.keyboard.press("r")
    assert Proposal.objects.get(pk=items["proposal"].pk).reviewed_by.username == "rita"


# --- reverting from an object's page ------------------------------------------------------------------------


def test_a_learned_phrase_and_a_block_are_reverted_with_a_reason_kept_in_history(db):
    from learning.models import PhraseBlock
    from learning.services.blocks import phrase_block_create

    verb_catalogue_load(entries=CBU_CATALOGUE)
    verb = Verb.objects.get(name="cbu.delete")
    phrase = learned_phrase_upsert(phrase="wipe the unit", verb=verb, user_id=None, source="candidate")
    rita = reviewer_user("rita", "change_learnedphrase", "view_learnedphrase", "change_phraseblock", "view_phraseblock")
    client = signed_in(rita)
    page = client.get(f"/admin/learning/learnedphrase/{phrase.pk}/change/").content.decode()
    assert f"/admin/revert/phrase/{phrase.pk}/" in page
    url = f"/admin/revert/phrase/{phrase.pk}/"
    asked = client.get(url).content.decode()
    assert "“wipe the unit” stops resolving to cbu.delete for every user (global)." in asked
    assert client.post(url, {"reason": ""}).status_code == 400
    assert LearnedPhrase.objects.get(pk=phrase.pk).is_active
    done = client.post(url, {"reason": "wrong verb for everyone"})
    assert done.status_code == 302 and done["Location"].endswith(f"/learnedphrase/{phrase.pk}/change/")
    row = LearnedPhrase.objects.get(pk=phrase.pk)
    latest = row.history.first()
    assert not row.is_active and latest.history_user == rita and "wrong verb for everyone" in latest.history_change_reason
    assert client.post(url, {"reason": "again"}).status_code == 409  # already reverted

    block = phrase_block_create(phrase="remove all", verb=verb, user_id=None, reason="unsafe")
    client.post(f"/admin/revert/block/{block.pk}/", {"reason": "the block was too wide"})
    block = PhraseBlock.objects.get(pk=block.pk)
    assert block.expires_at is not None and block.expires_at <= timezone.now()
    assert "too wide" in block.history.first().history_change_reason


def test_an_autonomy_level_is_reverted_to_the_level_before_its_last_change(db):
    from autonomy.services import autonomy_transition_approve

    email = Action.objects.create(name="email.send", autonomy_level=1)
    boss = reviewer_user("boss", "approve_autonomytransition", "view_action", "change_action")
    transition = AutonomyTransition.objects.create(action=email, from_level=1, to_level=2, evidence={}, reason="good")
    autonomy_transition_approve(transition=transition, user=boss)
    assert Action.objects.get(pk=email.pk).autonomy_level == 2
    viewer = reviewer_user("vic", "view_action", "change_action")
    assert signed_in(viewer).post(f"/admin/revert/autonomy/{email.pk}/", {"reason": "no"}).status_code == 403
    client = signed_in(boss)
    assert "from level 2 to level 1" in client.get(f"/admin/revert/autonomy/{email.pk}/").content.decode()
    client.post(f"/admin/revert/autonomy/{email.pk}/", {"reason": "too many complaints", "revert_of": transition.pk})
    assert Action.objects.get(pk=email.pk).autonomy_level == 1
    revert = AutonomyTransition.objects.filter(status="applied").order_by("-id").first()
    assert revert.evidence == {"revert_of": transition.pk} and revert.decided_by == boss
    # the revert is itself a change of level, so it can be reverted in turn (by a human, behind the same page)
    again = client.get(f"/admin/revert/autonomy/{email.pk}/")
    assert "from level 1 to level 2" in again.content.decode() and again.context["revert_of"] == revert.pk
    never = Action.objects.create(name="sms.send", autonomy_level=1)
    refused = client.post(f"/admin/revert/autonomy/{never.pk}/", {"reason": "why not"})
    assert refused.status_code == 409 and "No applied change" in refused.content.decode()


def test_a_correction_rule_is_reverted_from_its_page(inbox):
    agent, items = inbox
    rule = items["rule"]
    CorrectionRule.objects.filter(pk=rule.pk).update(status="active")
    rita = reviewer_user("rita", *ALL_PERMS)
    client = signed_in(rita)
    assert f"/admin/revert/rule/{rule.pk}/" in client.get(f"/admin/feedback/correctionrule/{rule.pk}/change/").content.decode()
    client.post(f"/admin/revert/rule/{rule.pk}/", {"reason": "it blocks every email"})
    rule = CorrectionRule.objects.get(pk=rule.pk)
    assert rule.status == "inactive" and rule.deactivated_by == rita


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_every_changelist_and_the_inbox_fit_1400_pixels(live_server, chromium):
    from django.contrib import admin as django_admin

    from autonomy.models import Episode

    agent, _ = mixed_inbox()
    long = "please could you move the quarterly reconciliation report for the northern region " * 3
    candidate_record(input_pattern=long[:480], suggested_output="cbu.list", user_id=None, source="correction", confidence=0.9)
    Episode.objects.create(agent=agent, status="finished", summary_text=("patterns 3, rules 2, calibration 0.91; " * 12))
    reviewer_user("root", superuser=True, password="s3cret-pass")
    page = _login(chromium, live_server, "root")
    paths = ["/admin/inbox/", "/admin/"] + [
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/" for model in django_admin.site._registry
    ]
    too_wide = {}
    for path in paths:
        page.goto(f"{live_server.url}{path}")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 1400:
            too_wide[path] = width
    assert too_wide == {}


def test_similar_candidates_are_decided_together_and_the_confirmation_lists_each(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    rita = reviewer_user("rita", *ALL_PERMS)
    main = candidate_record(
        input_pattern="show the units", suggested_output="cbu.list", user_id=None, source="correction", confidence=0.6
    )
    twin = candidate_record(
        input_pattern="show the unit", suggested_output="cbu.list", user_id=None, source="correction", confidence=0.6
    )
    other = candidate_record(
        input_pattern="show units", suggested_output="cbu.list", user_id=None, source="correction", confidence=0.6
    )
    client = signed_in(rita)
    url = f"/admin/inbox/candidate/{main.pk}/"
    page = client.get(url).content.decode()
    assert f'name="together" value="{twin.pk}"' in page and f'name="together" value="{other.pk}"' in page
    asked = client.post(url, {"action": "approve", "together": [twin.pk, other.pk]}).content.decode()
    assert 'id="together"' in asked and f"#{twin.pk}:" in asked and f"#{other.pk}:" in asked
    client.post(url, {"action": "approve", "together": [twin.pk, other.pk], "confirmed": "1"})
    statuses = set(LearningCandidate.objects.filter(pk__in=[main.pk, twin.pk, other.pk]).values_list("status", flat=True))
    assert statuses == {"applied"}
    assert Decision.objects.filter(kind="candidate").count() == 3


def test_the_backlog_is_recorded_per_day_and_drawn_on_the_inbox(one_day, inbox):
    from review.models import BacklogSnapshot
    from review.tasks import backlog_snapshot_task

    Claim.objects.create(
        kind="proposal", object_id=1, user=reviewer_user("old", *ALL_PERMS), claimed_at=timezone.now(), expires_at=timezone.now()
    )
    assert backlog_snapshot_task() == {"rows": 7, "claims_purged": 1}
    assert backlog_snapshot_task()["rows"] == 7  # the same day: overwritten, not added
    assert BacklogSnapshot.objects.count() == 7
    rita = reviewer_user("rita", *ALL_PERMS)
    daily = signed_in(rita).get("/admin/inbox/").context["progress"]["daily"]
    assert daily[-1]["backlog"] == 7 and daily[0]["backlog"] is None


def test_bulk_rule_activation_lists_each_rule_before_it_applies(inbox):
    _, items = inbox
    rule = items["rule"]
    boss = reviewer_user("boss", "view_correctionrule", "change_correctionrule", "approve_correctionrule")
    client = signed_in(boss)
    selected = {"action": "approve_selected", "_selected_action": [rule.pk]}
    asked = client.post("/admin/feedback/correctionrule/", selected).content.decode()
    assert "becomes active for agent-a on email.send" in asked
    assert CorrectionRule.objects.get(pk=rule.pk).status == "pending_approval"
    client.post("/admin/feedback/correctionrule/", {**selected, "post": "yes"})
    rule = CorrectionRule.objects.get(pk=rule.pk)
    assert rule.status == "active" and rule.approved_by == boss


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_a_conflicting_candidate_is_approved_only_after_the_acknowledgement(live_server, chromium):
    _, items = mixed_inbox()
    reviewer_user("rita", *ALL_PERMS, password="s3cret-pass")
    page = _login(chromium, live_server, "rita")
    candidate = items["candidate"]
    page.goto(f"{live_server.url}/admin/inbox/candidate/{candidate.pk}/")
    assert page.locator("#conflict-warning").is_visible()
    with page.expect_navigation():
        page.keyboard.press("a")  # no acknowledgement: refused, the same page says why
    assert "acknowledge the conflict" in page.content()
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "pending"
    page.check("#id_acknowledged")
    page.locator("body").click()  # leave the checkbox so the shortcut is not typed into a field
    with page.expect_navigation():
        page.keyboard.press("a")
    assert "for every user of this tenant" in page.locator("#change-statement").inner_text()
    with page.expect_navigation():
        page.keyboard.press("c")
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "applied"


def test_bad_inbox_parameters_answer_a_page_not_an_error(inbox):
    client = signed_in(reviewer_user("rita", *ALL_PERMS))
    for query in ("page=99999999999999999999999", "page=-1", "age=abc", "risk=extreme", "kind=nope", "tenant=x", "order=';--"):
        assert client.get(f"/admin/inbox/?{query}").status_code == 200, query
    assert client.get("/admin/inbox/?risk=%00").status_code == 400  # the input policy refuses NUL everywhere
    assert client.get("/admin/inbox/nope/1/").status_code == 404
    assert client.post(f"/admin/inbox/proposal/{inbox[1]['proposal'].pk}/", {"action": "explode"}).status_code == 400
    assert client.get("/admin/revert/nope/1/").status_code == 404


def _same_text_in_two_tenants():
    from tenants.context import tenant_scope

    verb_catalogue_load(entries=CBU_CATALOGUE)
    acme = tenant_create(slug="acme", name="Acme")
    with tenant_scope([acme.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
    mine = candidate_record(
        input_pattern="open the unit", suggested_output="cbu.show", user_id=None, source="correction", confidence=0.9
    )
    with tenant_scope([acme.pk]):
        theirs = candidate_record(
            input_pattern="open the unit", suggested_output="cbu.show", user_id=None, source="correction", confidence=0.9
        )
        learned_phrase_upsert(
            phrase="open the unit", verb=Verb.objects.get(name="cbu.delete"), user_id="zed", source="confirmation"
        )
    return acme, mine, theirs


def test_a_reviewer_of_several_tenants_decides_a_candidate_with_its_own_tenants_evidence_only():
    """Another tenant's identical candidate is not offered (nor decided) together, and its vocabulary is no conflict to
    acknowledge: the same decision answers the same whatever other tenants the reviewer belongs to."""
    acme, mine, theirs = _same_text_in_two_tenants()
    dora, rita = reviewer_user("dora", *ALL_PERMS), reviewer_user("rita", *ALL_PERMS)
    membership_add(user=rita, tenant=acme)
    page = signed_in(rita).get(f"/admin/inbox/candidate/{mine.pk}/")
    assert page.status_code == 200 and "zed" not in page.content.decode()
    first = signed_in(dora).post(f"/admin/inbox/candidate/{mine.pk}/", {"action": "approve"})
    second = signed_in(rita).post(f"/admin/inbox/candidate/{mine.pk}/", {"action": "approve"})
    assert first.status_code == second.status_code == 200  # the confirmation page, no conflict to acknowledge
    signed_in(rita).post(f"/admin/inbox/candidate/{mine.pk}/", {"action": "approve", "together": [theirs.pk], "confirmed": "1"})
    assert LearningCandidate.objects.get(pk=mine.pk).status == "applied"
    assert LearningCandidate.objects.get(pk=theirs.pk).status == "pending"
    assert not Decision.objects.filter(object_id=theirs.pk).exists()


def test_a_rule_still_waiting_is_not_reverted_behind_the_inbox():
    """A revert undoes a rule that applied; one still waiting is decided in the inbox (its claim and its decision
    log), so the revert refuses it and it stays waiting."""
    _, items = mixed_inbox()
    rule = items["rule"]
    holder, other = reviewer_user("holder", *ALL_PERMS), reviewer_user("other", *ALL_PERMS)
    assert signed_in(holder).get(f"/admin/inbox/rule/{rule.pk}/").status_code == 200  # held in the inbox
    assert "decide it in the review inbox" in signed_in(other).get(f"/admin/revert/rule/{rule.pk}/").context["statement"]
    answer = signed_in(other).post(f"/admin/revert/rule/{rule.pk}/", {"reason": "no"})
    assert answer.status_code == 409, answer.status_code
    rule.refresh_from_db()
    assert rule.status == "pending_approval" and not Decision.objects.filter(object_id=rule.pk).exists()


def test_a_phrase_revert_confirmed_before_a_user_taught_it_again_is_refused():
    """The confirmation said "stops resolving to cbu.show"; the user then taught the text to cbu.delete: posting that
    confirmation (late, or a second time after the revert) does not switch off what the reviewer never saw."""
    import re

    verb_catalogue_load(entries=CBU_CATALOGUE)
    show, delete = Verb.objects.get(name="cbu.show"), Verb.objects.get(name="cbu.delete")
    phrase = learned_phrase_upsert(phrase="open the unit", verb=show, user_id="ann", source="candidate")
    client = signed_in(reviewer_user("rita", "change_learnedphrase", "view_learnedphrase"))
    url = f"/admin/revert/phrase/{phrase.pk}/"
    shown = client.get(url).content.decode()
    assert "cbu.show" in shown
    token = re.search(r'name="revert_of" value="(\d+)"', shown).group(1)
    learned_phrase_upsert(phrase="open the unit", verb=delete, user_id="ann", source="confirmation")  # meanwhile
    assert client.post(url, {"reason": "wrong approval", "revert_of": "abc"}).status_code == 409  # no number: refused
    late = client.post(url, {"reason": "wrong approval", "revert_of": token})
    assert late.status_code == 409 and "changed since" in late.content.decode()
    assert LearnedPhrase.objects.get(pk=phrase.pk).is_active
    fresh = re.search(r'name="revert_of" value="(\d+)"', client.get(url).content.decode()).group(1)
    assert client.post(url, {"reason": "wrong", "revert_of": fresh}).status_code == 302  # seen now: reverted
    learned_phrase_upsert(phrase="open the unit", verb=delete, user_id="ann", source="confirmation")  # taught again
    assert client.post(url, {"reason": "wrong", "revert_of": fresh}).status_code == 409  # the same form a second time
    assert LearnedPhrase.objects.get(pk=phrase.pk).is_active


def test_a_phrase_revert_of_a_row_without_history_is_refused_once_the_row_changed():
    """A row with no audit trail (created in bulk, or before history existed) is version 0 on the page; a change
    after the page was shown gives it a history row, and the confirmation is refused."""
    import re

    verb_catalogue_load(entries=CBU_CATALOGUE)
    show, delete = Verb.objects.get(name="cbu.show"), Verb.objects.get(name="cbu.delete")
    phrase = learned_phrase_upsert(phrase="open the unit", verb=show, user_id="ann", source="candidate")
    phrase.history.all().delete()
    client = signed_in(reviewer_user("rita", "change_learnedphrase", "view_learnedphrase"))
    url = f"/admin/revert/phrase/{phrase.pk}/"
    assert re.search(r'name="revert_of" value="(\d+)"', client.get(url).content.decode()).group(1) == "0"
    learned_phrase_upsert(phrase="open the unit", verb=delete, user_id="ann", source="confirmation")  # meanwhile
    assert client.post(url, {"reason": "wrong approval", "revert_of": "0"}).status_code == 409
    assert LearnedPhrase.objects.get(pk=phrase.pk).is_active
