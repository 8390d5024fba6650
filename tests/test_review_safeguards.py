"""The review inbox refuses what a reviewer did not confirm: repeated reverts, verbs decided together by accident,
claims by viewers, odd digits, confirmations of items decided already."""

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.models import Action
from autonomy.models import AutonomyTransition
from autonomy.services import autonomy_transition_approve
from common.api import Conflict
from learning.models import LearnedPhrase, LearningCandidate, PhraseBlock, Verb
from learning.selectors.review import candidate_evidence
from learning.services.blocks import phrase_block_create, phrase_block_expire
from learning.services.candidates import candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.phrases import learned_phrase_upsert
from review import services as review_services
from review.models import Claim, Decision
from tenants.context import tenant_filter_ids, tenant_scope
from tenants.services import tenant_create
from tests.conftest import CBU_CATALOGUE, reviewer_user
from tests.test_review_inbox import ALL_PERMS, mixed_inbox, signed_in

pytestmark = pytest.mark.django_db


# --- reverts -------------------------------------------------------------------------------------------------


def _promoted(name="ticket.close"):
    """An action a reviewer moved from level 1 to level 3, and that reviewer."""
    action = Action.objects.create(name=name, autonomy_level=1)
    boss = reviewer_user("boss", "approve_autonomytransition", "view_action", "change_action")
    transition = AutonomyTransition.objects.create(action=action, from_level=1, to_level=3, evidence={}, reason="good")
    autonomy_transition_approve(transition=transition, user=boss)
    return action, transition, boss


def test_a_double_submitted_autonomy_revert_is_refused_and_the_level_stays():
    action, transition, boss = _promoted()
    client = signed_in(boss)
    url = f"/admin/revert/autonomy/{action.pk}/"
    page = client.get(url)
    assert page.context["revert_of"] == transition.pk
    assert f'name="revert_of" value="{transition.pk}"' in page.content.decode()
    form = {"reason": "too risky", "revert_of": transition.pk}
    assert client.post(url, form).status_code == 302
    assert Action.objects.get(pk=action.pk).autonomy_level == 1
    again = client.post(url, form)
    assert again.status_code == 409
    assert f"Transition #{transition.pk} was already reverted by boss" in again.content.decode()
    assert Action.objects.get(pk=action.pk).autonomy_level == 1
    assert AutonomyTransition.objects.filter(action=action, status="applied").count() == 2


def test_an_autonomy_revert_without_the_confirmed_transition_is_refused():
    action, _, boss = _promoted()
    refused = signed_in(boss).post(f"/admin/revert/autonomy/{action.pk}/", {"reason": "too risky"})
    assert refused.status_code == 409 and "changed since the revert was shown" in refused.content.decode()
    assert Action.objects.get(pk=action.pk).autonomy_level == 3


def test_the_revert_page_is_forbidden_without_the_revert_permission():
    action, _, _ = _promoted()
    viewer = reviewer_user("vic", "view_action", "change_action")
    assert signed_in(viewer).get(f"/admin/revert/autonomy/{action.pk}/").status_code == 403


def test_reverting_an_ended_block_says_so_and_changes_nothing():
    verb_catalogue_load(entries=CBU_CATALOGUE)
    verb = Verb.objects.get(name="cbu.delete")
    ended = timezone.now() - timedelta(hours=1)
    block = phrase_block_create(phrase="remove all", verb=verb, user_id=None, reason="unsafe")
    PhraseBlock.objects.filter(pk=block.pk).update(expires_at=ended)
    rita = reviewer_user("rita", "change_phraseblock", "view_phraseblock")
    client = signed_in(rita)
    url = f"/admin/revert/block/{block.pk}/"
    assert "already ended" in client.get(url).content.decode()
    refused = client.post(url, {"reason": "again"})
    assert refused.status_code == 409 and "already ended" in refused.content.decode()
    assert PhraseBlock.objects.get(pk=block.pk).expires_at == ended


def test_a_revert_runs_inside_the_objects_tenant(monkeypatch):
    acme = tenant_create(slug="acme", name="Acme")
    with tenant_scope([acme.pk]):
        verb_catalogue_load(entries=CBU_CATALOGUE)
        phrase = learned_phrase_upsert(
            phrase="wipe the unit", verb=Verb.objects.get(name="cbu.delete"), user_id=None, source="candidate"
        )
    seen = []
    real = review_services.learned_phrase_deactivate

    def recording(**kwargs):
        seen.append(tenant_filter_ids())
        return real(**kwargs)

    monkeypatch.setattr(review_services, "learned_phrase_deactivate", recording)
    root = reviewer_user("root", superuser=True)
    assert signed_in(root).post(f"/admin/revert/phrase/{phrase.pk}/", {"reason": "wrong verb"}).status_code == 302
    assert seen == [(acme.pk,)]
    assert not LearnedPhrase.objects.get(pk=phrase.pk).is_active


# --- deciding candidates together ----------------------------------------------------------------------------


def _same_text_two_verbs():
    verb_catalogue_load(entries=CBU_CATALOGUE)
    main = candidate_record(
        input_pattern="show the units", suggested_output="cbu.list", user_id=None, source="correction", confidence=0.6
    )
    twin = candidate_record(
        input_pattern="show the unit", suggested_output="cbu.list", user_id=None, source="correction", confidence=0.6
    )
    other = candidate_record(
        input_pattern="show the units", suggested_output="cbu.delete", user_id="ann", source="correction", confidence=0.6
    )
    near = candidate_record(
        input_pattern="show units", suggested_output="cbu.delete", user_id=None, source="correction", confidence=0.6
    )
    return main, twin, other, near


def test_only_candidates_for_the_same_verb_are_decided_together():
    main, twin, other, near = _same_text_two_verbs()
    evidence = candidate_evidence(main)
    assert [d.pk for d in evidence["duplicates"]] == [twin.pk]
    assert {d.pk for d in evidence["alternatives"]} == {other.pk, near.pk}
    client = signed_in(reviewer_user("rita", *ALL_PERMS))
    url = f"/admin/inbox/candidate/{main.pk}/"
    page = client.get(url).content.decode()
    assert f'name="together" value="{twin.pk}"' in page
    assert f'name="together" value="{other.pk}"' not in page and f'name="together" value="{near.pk}"' not in page
    alternatives = page.split('id="alternatives"')[1]
    assert "“show the units” → cbu.delete" in alternatives and "“show units” → cbu.delete" in alternatives
    forged = {"action": "approve", "together": [twin.pk, other.pk, near.pk]}
    asked = client.post(url, forged).content.decode()
    assert f"#{twin.pk}:" in asked and f"#{other.pk}:" not in asked and f"#{near.pk}:" not in asked
    done = client.post(url, {**forged, "confirmed": "1"}, follow=True)
    notes = [str(m) for m in done.context["messages"]]
    assert "Also approved: “show the unit” → cbu.list." in notes
    statuses = dict(LearningCandidate.objects.values_list("pk", "status"))
    assert statuses[main.pk] == statuses[twin.pk] == "applied"
    assert statuses[other.pk] == statuses[near.pk] == "pending"
    assert set(LearnedPhrase.objects.filter(user_id__isnull=True).values_list("normalized", "verb__name")) >= {
        ("show the units", "cbu.list")
    }
    assert not LearnedPhrase.objects.filter(normalized__in=["show the units", "show units"], verb__name="cbu.delete").exists()
    assert set(Decision.objects.values_list("object_id", flat=True)) == {main.pk, twin.pk}


def test_rejecting_together_leaves_candidates_for_another_verb_pending():
    main, twin, other, near = _same_text_two_verbs()
    client = signed_in(reviewer_user("rita", *ALL_PERMS))
    client.post(
        f"/admin/inbox/candidate/{other.pk}/", {"action": "reject", "category": "other", "together": [main.pk, twin.pk, near.pk]}
    )
    statuses = dict(LearningCandidate.objects.values_list("pk", "status"))
    assert statuses[other.pk] == "rejected"
    assert statuses[main.pk] == statuses[twin.pk] == "pending"
    assert statuses[near.pk] == "rejected"  # the same verb, a near spelling: decided together


# --- claims ----------------------------------------------------------------------------------------------------


def test_a_viewer_opening_an_item_leaves_no_claim():
    _, items = mixed_inbox()
    viewer = reviewer_user("vera", "view_autonomytransition")
    url = f"/admin/inbox/transition/{items['transition'].pk}/"
    page = signed_in(viewer).get(url).content.decode()
    assert page and 'id="claim-note"' not in page and "Held by you" not in page
    assert not Claim.objects.exists()
    rita = reviewer_user("rita", *ALL_PERMS)
    assert 'id="claim-note"' in signed_in(rita).get(url).content.decode()
    seen = signed_in(viewer).get(url).content.decode()
    assert "rita holds this item" in seen and "Held by you" not in seen
    assert Claim.objects.get().user == rita


# --- odd input -------------------------------------------------------------------------------------------------


def test_digits_other_than_ascii_answer_a_page_not_an_error():
    _, items = mixed_inbox()
    client = signed_in(reviewer_user("rita", *ALL_PERMS))
    for query in ("age=²", "page=²", "tenant=²", "age=٣", "page=٣", "tenant=٣", "tenant=9223372036854775808"):
        assert client.get("/admin/inbox/", dict([query.split("=")])).status_code == 200, query
    candidate = items["candidate"]
    response = client.post(f"/admin/inbox/candidate/{candidate.pk}/", {"action": "reject", "together": ["²", "٣"]})
    assert response.status_code == 302
    assert LearningCandidate.objects.get(pk=candidate.pk).status == "rejected"


# --- items decided already ------------------------------------------------------------------------------------


def test_approving_an_item_decided_already_says_who_decided_it_at_once():
    _, items = mixed_inbox()
    rita, sam = reviewer_user("rita", *ALL_PERMS), reviewer_user("sam", *ALL_PERMS)
    url = f"/admin/inbox/transition/{items['transition'].pk}/"
    signed_in(rita).post(url, {"action": "reject", "reason": "not yet"})
    late = signed_in(sam).post(url, {"action": "approve"})
    body = late.content.decode()
    assert late.status_code == 409
    assert "Already decided: rejected by rita at" in body and 'id="change-statement"' not in body
    assert Action.objects.get(name="email.send").autonomy_level == 1


def test_a_block_ending_while_the_revert_waits_for_its_lock_is_refused_not_reported_as_done():
    """The service decides under the block's row lock whether the revert changed anything (no clock comparison)."""
    verb_catalogue_load(entries=CBU_CATALOGUE)
    block = phrase_block_create(phrase="wipe all", verb=Verb.objects.get(name="cbu.delete"), user_id=None, reason="unsafe")
    ended = phrase_block_expire(block_id=block.pk, reason="first")  # ends it now: expires_at == the moment it ended
    with pytest.raises(Conflict) as refused:
        phrase_block_expire(block_id=block.pk, reason="second", must_be_active=True)
    assert refused.value.code == "already_inactive" and "already ended" in refused.value.message
    assert phrase_block_expire(block_id=block.pk).expires_at == ended.expires_at  # the API's expire stays idempotent
    assert PhraseBlock.objects.get(pk=block.pk).expires_at == ended.expires_at


def test_a_decision_checks_conflicts_without_reading_the_rest_of_the_evidence(django_assert_num_queries):
    """The inbox's decision and the changelist's approval ask only what maps the text to another verb (two queries),
    the same list the decision page shows."""
    from learning.selectors.review import candidate_conflicts

    _, items = mixed_inbox()
    candidate = items["candidate"]
    with django_assert_num_queries(2):
        conflicts = candidate_conflicts(candidate)
    assert conflicts == candidate_evidence(candidate)["conflicts"]
    assert {c["user_id"] for c in conflicts} == {"ann", "ben"} and {c["verb"] for c in conflicts} == {"cbu.delete"}
