"""Admin pages stay bounded at production scale: filter sidebars, inlines, history pages and report tables render the
same number of queries and at most a page of rows however many agents, actions, members or versions there are."""

import re
import uuid

import pytest
from django.contrib import admin
from django.contrib.admin.filters import AllValuesFieldListFilter, RelatedFieldListFilter
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition
from common.admin import FILTER_CHOICES_MAX, BoundedRelatedFilter, BoundedValuesFilter
from feedback.models import CorrectionRule
from learning.models import DisambiguationRequest, PhraseEvidence
from tenants.context import tenant_scope
from tenants.models import Membership, Tenant
from tenants.services import membership_add, tenant_create
from tests.conftest import reject_n, reviewer_user
from tests.test_admin_query_counts import _queries
from tests.test_review_inbox import signed_in

pytestmark = pytest.mark.django_db

FEEDBACK = "/admin/feedback/feedbackrecord/"


def _agents(n, prefix="bot", tenant=None):
    if tenant is None:
        return [Agent.objects.create(name=f"{prefix}-{i:03d}") for i in range(n)]
    with tenant_scope([tenant.pk]):
        return [Agent.objects.create(name=f"{prefix}-{i:03d}", tenant=tenant) for i in range(n)]


def _agent_links(page: str) -> set[str]:
    return set(re.findall(r"agent__id__exact=(\d+)", page))


def _filtered_fields(model_admin):
    for item in model_admin.list_filter:
        if isinstance(item, str):
            yield item, None
        elif isinstance(item, (list, tuple)):
            yield item[0], item[1]


def test_every_agent_and_action_filter_of_the_admin_is_the_bounded_one():
    unbounded = []
    for model, model_admin in admin.site._registry.items():
        for name, spec in _filtered_fields(model_admin):
            field = model._meta.get_field(name.split("__")[0])
            if getattr(field, "related_model", None) in (Agent, Action) and len(name.split("__")) == 1:
                if spec is None or (
                    issubclass(spec, (RelatedFieldListFilter, AllValuesFieldListFilter))
                    and not issubclass(spec, BoundedRelatedFilter)
                ):
                    unbounded.append(f"{model._meta.label}.{name}")
    assert unbounded == []


def test_a_sidebar_lists_a_few_agents_and_asks_for_a_name_when_there_are_many():
    root = signed_in(reviewer_user("root", superuser=True))
    few = _agents(3)
    page = root.get(FEEDBACK).content.decode()
    assert _agent_links(page) == {str(a.pk) for a in few} and 'name="agent_name"' not in page
    many = few + _agents(FILTER_CHOICES_MAX + 10, prefix="crawler")
    page = root.get(FEEDBACK).content.decode()
    assert len(_agent_links(page)) <= FILTER_CHOICES_MAX and 'name="agent_name"' in page
    # the search filters the list, keeps the other parameters, and lists the agents whose name matches
    reject_n(few[0], 1)
    reject_n(many[-1], 2)
    searched = root.get(FEEDBACK, {"agent_name": "Bot-00", "feedback_type__exact": "rejection"})
    assert searched.status_code == 200 and searched.context["cl"].result_count == 1
    page = searched.content.decode()
    assert _agent_links(page) == {str(a.pk) for a in few}
    form = re.search(r'<form method="get" class="bounded-filter-search".*?</form>', page, re.S).group(0)
    assert 'name="feedback_type__exact" value="rejection"' in form and 'name="agent_name" value="Bot-00"' in form
    assert root.get(FEEDBACK, {"agent_name": "", "_facets": "True"}).context["cl"].result_count == 3
    # the links of the current filter still work, and the one chosen is shown even beyond the first page of names
    last = many[-1]
    page = root.get(FEEDBACK, {"agent__id__exact": last.pk}).content.decode()
    assert re.search(rf'class="selected">\s*<a href="[^"]*agent__id__exact={last.pk}', page)


@pytest.mark.parametrize(
    "page",
    [
        "/admin/feedback/feedbackrecord/",
        "/admin/feedback/feedbackrecordarchive/",
        "/admin/feedback/mistakepattern/",
        "/admin/feedback/correctionrule/",
        "/admin/feedback/proposal/",
        "/admin/feedback/execution/",
        "/admin/autonomy/calibrationrecord/",
        "/admin/autonomy/episode/",
        "/admin/agents/apikey/",
        "/admin/review/decision/",
    ],
)
def test_no_agent_filter_lists_every_agent(page):
    _agents(FILTER_CHOICES_MAX + 10)
    root = signed_in(reviewer_user("root", superuser=True))
    assert len(_agent_links(root.get(page).content.decode())) <= FILTER_CHOICES_MAX


def test_no_action_filter_lists_every_action():
    for i in range(FILTER_CHOICES_MAX + 10):
        Action.objects.create(name=f"task.step_{i:03d}")
    root = signed_in(reviewer_user("root", superuser=True))
    for page in ("/admin/autonomy/autonomytransition/", "/admin/feedback/proposal/", FEEDBACK):
        shown = root.get(page).content.decode()
        assert len(set(re.findall(r"action__id__exact=(\d+)", shown))) <= FILTER_CHOICES_MAX, page
        assert 'name="action_name"' in shown, page


def test_a_tenants_reviewer_never_sees_another_tenants_agent_in_the_sidebar():
    acme, globex = tenant_create(slug="acme"), tenant_create(slug="globex")
    ours = _agents(2, prefix="acme-bot", tenant=acme)
    theirs = _agents(FILTER_CHOICES_MAX + 10, prefix="globex-bot", tenant=globex)
    rita = reviewer_user("rita", "view_feedbackrecord", "view_correctionrule")
    membership_add(user=rita, tenant=acme)
    client = signed_in(rita)
    for query in ({}, {"agent_name": "bot"}, {"agent__id__exact": theirs[0].pk}):
        for page in (FEEDBACK, "/admin/feedback/correctionrule/"):
            response = client.get(page, query)
            assert response.status_code == 200, (page, query)
            shown = response.content.decode()
            echoed = {str(pk) for pk in query.values()}  # the id the reviewer typed, kept in the other links
            assert "globex-bot" not in shown, (page, query)
            assert not (_agent_links(shown) - echoed) & {str(a.pk) for a in theirs}, (page, query)
    shown = client.get(FEEDBACK).content.decode()
    assert _agent_links(shown) == {str(a.pk) for a in ours}
    assert Tenant.objects.filter(slug="globex").exists()


def test_the_phrase_evidence_verb_filter_lists_a_few_verbs_and_asks_for_one_when_there_are_many():
    assert admin.site._registry[PhraseEvidence].list_filter == [("verb", BoundedValuesFilter)]
    for i in range(FILTER_CHOICES_MAX + 10):
        PhraseEvidence.objects.create(phrase=f"p{i}", normalized=f"p{i}", verb=f"task.step_{i:03d}")
    root = signed_in(reviewer_user("root", superuser=True))
    url = "/admin/learning/phraseevidence/"
    page = root.get(url).content.decode()
    assert len(set(re.findall(r"verb=(task\.step_\d+)", page))) <= FILTER_CHOICES_MAX and 'name="verb_contains"' in page
    searched = root.get(url, {"verb_contains": "STEP_05"})
    assert searched.status_code == 200 and searched.context["cl"].result_count == 10
    assert len(set(re.findall(r"verb=(task\.step_\d+)", searched.content.decode()))) == 10
    chosen = root.get(url, {"verb": "task.step_059"}).content.decode()
    assert re.search(r'class="selected">\s*<a href="[^"]*verb=task.step_059', chosen)


def _membership_rows(tenant, first, last):
    for i in range(first, last):
        user = reviewer_user(f"member-{i}")
        membership_add(user=user, tenant=tenant)


def test_a_tenants_page_reads_the_same_queries_for_2_or_12_members():
    root = signed_in(reviewer_user("root", superuser=True))
    acme = tenant_create(slug="acme")
    page = f"/admin/tenants/tenant/{acme.pk}/change/"
    _membership_rows(acme, 0, 2)
    few = _queries(root, page)
    _membership_rows(acme, 2, 12)
    shown = root.get(page).content.decode()
    assert "member-11" in shown
    assert _queries(root, page) == few


def _tenant_form(tenant, **changes):
    rows = list(Membership.objects.filter(tenant=tenant).order_by("pk"))
    data = {"name": tenant.name, "memberships-TOTAL_FORMS": str(len(rows)), "memberships-INITIAL_FORMS": str(len(rows))}
    for i, m in enumerate(rows):
        data.update({f"memberships-{i}-id": str(m.pk), f"memberships-{i}-tenant": str(tenant.pk)})
        data[f"memberships-{i}-user"] = str(m.user_id)
    data.update(changes)
    return data


def test_saving_a_tenants_page_costs_the_same_queries_for_2_or_12_members():
    root = signed_in(reviewer_user("root", superuser=True))
    acme = tenant_create(slug="acme")
    page = f"/admin/tenants/tenant/{acme.pk}/change/"
    counts = []
    for first, last in ((0, 2), (2, 12)):
        _membership_rows(acme, first, last)
        with CaptureQueriesContext(connection) as ctx:
            assert root.post(page, _tenant_form(acme)).status_code == 302
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1], counts

    # what the page does still works: a row's user changed, one added, one removed, a duplicate refused
    first, second = Membership.objects.filter(tenant=acme).order_by("pk")[:2]
    newcomer, other = reviewer_user("newcomer"), reviewer_user("other")
    n = Membership.objects.filter(tenant=acme).count()
    form = _tenant_form(acme, **{"memberships-0-user": str(newcomer.pk), "memberships-1-DELETE": "on"})
    form.update(
        {"memberships-TOTAL_FORMS": str(n + 1), f"memberships-{n}-tenant": str(acme.pk), f"memberships-{n}-user": str(other.pk)}
    )
    assert root.post(page, form).status_code == 302
    members = set(Membership.objects.filter(tenant=acme).values_list("user__username", flat=True))
    assert {"newcomer", "other"} <= members and first.user.username not in members and second.user.username not in members
    duplicate = _tenant_form(acme, **{"memberships-0-user": str(other.pk)})
    response = root.post(page, duplicate)
    assert response.status_code == 200 and "already exists" in response.content.decode().lower()


def _transition():
    action = Action.objects.create(name="email.send")
    row = AutonomyTransition.objects.create(action=action, from_level=1, to_level=2, evidence={}, reason="r0")
    return row, "reason", "/admin/autonomy/autonomytransition/{}/history/", "email.send"


def _rule():
    agent, action = Agent.objects.create(name="mailer"), Action.objects.create(name="email.send")
    row = CorrectionRule.objects.create(agent=agent, action=action, precondition="p0", correction={})
    return row, "precondition", "/admin/feedback/correctionrule/{}/history/", "mailer · email.send"


@pytest.mark.parametrize("make", [_transition, _rule], ids=["transition", "correction_rule"])
def test_a_history_page_reads_the_same_queries_for_2_or_12_versions(make):
    root = signed_in(reviewer_user("root", superuser=True))
    row, field, page, name = make()
    page = page.format(row.pk)

    def versions(first, last):
        for i in range(first, last):
            setattr(row, field, f"v{i}")
            row.save()

    versions(1, 2)
    few = _queries(root, page)
    versions(2, 12)
    assert row.history.count() == 12 and name in root.get(page).content.decode()
    assert _queries(root, page) == few


def test_the_disambiguation_outcomes_page_shows_a_page_of_verbs_however_many_were_offered():
    from learning.admin.disambiguation import OUTCOME_ROWS_PER_PAGE

    verbs = [f"verb_{i:03d}" for i in range(OUTCOME_ROWS_PER_PAGE + 20)]
    DisambiguationRequest.objects.create(
        request_id=uuid.uuid4(), text="t", normalized="t", options=[{"verb": v, "score": 0.5} for v in verbs]
    )
    client = signed_in(reviewer_user("viewer", "view_disambiguationrequest"))
    url = "/admin/learning/disambiguationrequest/outcomes/"
    first = client.get(url).content.decode()
    shown = set(re.findall(r"<td>(verb_\d+)</td>", first))
    assert len(shown) == OUTCOME_ROWS_PER_PAGE and "?days=30&amp;p=2" in first
    second = set(re.findall(r"<td>(verb_\d+)</td>", client.get(url, {"p": 2}).content.decode()))
    assert shown | second == set(verbs) and not shown & second
    assert client.get(url, {"p": "junk"}).status_code == 200


def _user_links(page: str) -> set[str]:
    return set(re.findall(r"user__id__exact=(\d+)", page))


def test_the_decision_logs_reviewer_filter_lists_only_who_decided_a_few_at_a_time():
    from django.contrib.auth import get_user_model

    from review.models import Decision, Kind

    acme = tenant_create(slug="acme")
    users = get_user_model().objects
    deciders = [users.create_user(f"reviewer-{i:03d}") for i in range(FILTER_CHOICES_MAX + 10)]
    Decision.objects.bulk_create(
        [Decision(kind=Kind.RULE, object_id=i, user=u, verdict="approve") for i, u in enumerate(deciders)]
    )
    idle = users.create_user("reviewer-idle")  # decided nothing
    with tenant_scope([acme.pk]):
        elsewhere = users.create_user("acme-reviewer")
        Decision.objects.create(kind=Kind.RULE, object_id=1, user=elsewhere, verdict="reject", tenant=acme)
    rita = reviewer_user("rita", "view_decision")
    client = signed_in(rita)

    page = client.get("/admin/review/decision/").content.decode()
    listed = _user_links(page)
    assert len(listed) == FILTER_CHOICES_MAX and listed <= {str(u.pk) for u in deciders}
    assert 'name="user_name"' in page
    searched = client.get("/admin/review/decision/", {"user_name": "reviewer-05"})
    assert searched.status_code == 200 and searched.context["cl"].result_count == 10
    assert _user_links(searched.content.decode()) == {str(u.pk) for u in deciders[50:60]}
    # neither the reviewer who decided nothing nor another tenant's reviewer is offered
    for name in ("reviewer-idle", "acme"):
        shown = client.get("/admin/review/decision/", {"user_name": name}).content.decode()
        assert not _user_links(shown) & {str(idle.pk), str(elsewhere.pk)}, name


def test_the_disambiguation_outcomes_page_reads_one_period_of_requests(settings):
    settings.RESOLUTION_RETENTION_DAYS = 90
    for verb, days_old in (("recent.verb", 2), ("month.verb", 20), ("old.verb", 60)):
        row = DisambiguationRequest.objects.create(
            request_id=uuid.uuid4(), text="t", normalized="t", options=[{"verb": verb, "score": 0.5}]
        )
        DisambiguationRequest.objects.filter(pk=row.pk).update(created_at=timezone.now() - timezone.timedelta(days=days_old))
    client = signed_in(reviewer_user("viewer", "view_disambiguationrequest"))
    url = "/admin/learning/disambiguationrequest/outcomes/"

    def verbs(query):
        response = client.get(url, query)
        assert response.status_code == 200
        return set(re.findall(r"<td>([a-z]+\.verb)</td>", response.content.decode())), response.context["days"]

    assert verbs({}) == ({"recent.verb", "month.verb"}, 30)  # the default period
    assert verbs({"days": "7"}) == ({"recent.verb"}, 7)
    assert verbs({"days": "90"}) == ({"recent.verb", "month.verb", "old.verb"}, 90)
    assert verbs({"days": "5000"})[1] == 30 and verbs({"days": "x"})[1] == 30  # not offered: the default
    settings.RESOLUTION_RETENTION_DAYS = 10  # nothing older is kept: no longer period is offered
    page = client.get(url).content.decode()
    assert client.get(url).context["periods"] == [1, 7, 10] and "days=30" not in page


def test_the_signals_per_phrase_page_reads_one_period_of_requests(settings):
    from learning.models import LearningSignal

    settings.RESOLUTION_RETENTION_DAYS = 90
    for text, days_old in (("freeze my card", 3), ("lost my card", 45)):
        row = DisambiguationRequest.objects.create(
            request_id=uuid.uuid4(), text=text, normalized=text, options=[{"verb": "card.freeze", "score": 0.5}]
        )
        DisambiguationRequest.objects.filter(pk=row.pk).update(created_at=timezone.now() - timezone.timedelta(days=days_old))
        LearningSignal.objects.create(
            request=row,
            phrase=text,
            normalized=text,
            verb="card.freeze",
            outcome="selected_alt",
            source="user_disambiguation",
            confidence=1.0,
        )
    client = signed_in(reviewer_user("viewer", "view_learningsignal"))
    url = "/admin/learning/learningsignal/per-phrase/"

    def phrases(query):
        response = client.get(url, query)
        assert response.status_code == 200
        return set(re.findall(r"<td>([a-z ]+ card)</td>", response.content.decode()))

    assert phrases({}) == {"freeze my card"}  # the default: 30 days
    assert phrases({"days": "90"}) == {"freeze my card", "lost my card"}
    assert phrases({"days": "90", "q": "lost"}) == {"lost my card"}
    page = client.get(url, {"days": "90", "q": "lost"}).content.decode()
    assert 'name="days" value="90"' in page and "?days=7&amp;q=lost" in page  # the search keeps the period and back


@pytest.mark.parametrize("value", ["\N{SUPERSCRIPT TWO}", "x", "99999999999999999999"])
def test_a_user_value_that_is_no_key_on_the_tenant_page_is_a_form_error(value):
    from django.test import Client

    client = Client(raise_request_exception=False)
    client.force_login(reviewer_user("root", superuser=True))
    acme = tenant_create(slug="acme")
    membership_add(user=reviewer_user("member-1"), tenant=acme)
    response = client.post(f"/admin/tenants/tenant/{acme.pk}/change/", _tenant_form(acme, **{"memberships-0-user": value}))
    assert response.status_code == 200 and "errornote" in response.content.decode()  # the page again, with the error
    assert Membership.objects.filter(tenant=acme, user__username="member-1").exists()


def test_the_memories_top_values_are_counted_among_the_newest_rows_only(monkeypatch):
    """The user and topic filters count values over the newest rows (a bounded read on every page view), not over
    every memory ever stored; a value beyond them still filters through the URL."""
    from common.admin import TopValuesFilter
    from tests.conftest import make_memory

    for i in range(4):
        make_memory(user="old-user", content=f"Old lesson number {i} about deploying the web application safely.")
    for i in range(2):
        make_memory(user="new-user", content=f"New lesson number {i} about rotating the staging credentials weekly.")
    root = signed_in(reviewer_user("root", superuser=True))

    def offered_users():
        page = root.get("/admin/memories/memory/").content.decode()
        sidebar = re.search(r'data-filter-title="user id".*?</details>', page, re.S).group(0)
        return re.findall(r"\?user_id=([\w-]+)\"", sidebar)

    monkeypatch.setattr(TopValuesFilter, "sample", 2)
    assert offered_users() == ["new-user"]
    monkeypatch.setattr(TopValuesFilter, "sample", 20_000)
    assert offered_users() == ["old-user", "new-user"]  # most frequent first
    filtered = root.get("/admin/memories/memory/?user_id=old-user")
    assert filtered.status_code == 200 and "Old lesson number 0" in filtered.content.decode()


def test_read_only_inlines_show_the_newest_rows_of_their_parent_only():
    """A long run's events and a memory's folded observations: the change page shows the newest INLINE_ROWS_MAX of
    this parent's rows, in the inline's order, not every row."""
    from autonomy.models import Episode, EpisodeEvent
    from common.admin import INLINE_ROWS_MAX

    run = Episode.objects.create()
    other = Episode.objects.create()
    EpisodeEvent.objects.bulk_create(
        [EpisodeEvent(episode=run, seq=i, kind="step", message=f"step number {i:03d}") for i in range(1, 61)]
        + [EpisodeEvent(episode=other, seq=i, kind="step", message=f"other run {i:03d}") for i in range(1, 4)]
    )
    root = signed_in(reviewer_user("root", superuser=True))
    page = root.get(f"/admin/autonomy/episode/{run.pk}/change/").content.decode()
    shown = re.findall(r"step number (\d{3})", page)
    assert len(shown) == INLINE_ROWS_MAX == 50 and shown == [f"{i:03d}" for i in range(11, 61)]
    assert "other run" not in page and "the last 50" in page
    assert re.findall(r"other run (\d{3})", root.get(f"/admin/autonomy/episode/{other.pk}/change/").content.decode()) == [
        "001",
        "002",
        "003",
    ]
