"""Change pages that must refuse on the page, not fail in the database: a rename onto a name the row's tenant uses, an
alias edited onto one its scope has; and what no change page may change: who a learning candidate belongs to."""

import pytest

from agents.models import Agent
from learning.models import EntityAlias, LearningCandidate
from learning.services.candidates import candidate_record
from learning.services.catalogue import entity_alias_save
from tenants.context import tenant_scope
from tenants.services import tenant_create

pytestmark = pytest.mark.django_db


def test_renaming_an_agent_to_a_name_its_tenant_uses_is_a_form_error(su):
    one = Agent.objects.create(name="agent-one")
    Agent.objects.create(name="agent-two")
    page = su.post(
        f"/admin/agents/agent/{one.pk}/change/",
        {"name": "agent-two", "description": "", "is_active": "on", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
    )
    assert page.status_code == 200 and "already exists" in page.content.decode()
    assert Agent.objects.get(pk=one.pk).name == "agent-one"


def test_editing_an_alias_onto_one_its_scope_has_is_a_form_error(su):
    entity_alias_save(alias=EntityAlias(alias="big blue", canonical_name="IBM"))
    other = entity_alias_save(alias=EntityAlias(alias="blue giant", canonical_name="IBM"))
    form = {
        "alias": "Big Blue",
        "canonical_name": "IBM",
        "entity_type": "entity",
        "confidence": "1",
        "occurrence_count": "1",
        "source": "manual",
        "is_active": "on",
        "user_id": "",
    }
    page = su.post(f"/admin/learning/entityalias/{other.pk}/change/", form)
    assert page.status_code == 200 and "already exists" in page.content.decode()
    assert EntityAlias.objects.get(pk=other.pk).alias == "blue giant"


def test_no_change_page_moves_a_candidate_to_another_agent_or_tenant(catalogue, su):
    other = tenant_create(slug="initech")
    with tenant_scope([other.pk]):
        foreign = Agent.objects.create(name="initech-bot", private_user_data=True)
    mine = Agent.objects.create(name="mine", private_user_data=True)
    candidate = candidate_record(
        input_pattern="spin up a fresh unit", suggested_output="cbu.create", user_id="alice", source="test", confidence=0.6
    )
    for agent in (foreign, mine):
        su.post(f"/admin/learning/learningcandidate/{candidate.pk}/change/", {"private_agent": str(agent.pk)})
        assert LearningCandidate.objects.get(pk=candidate.pk).private_agent_id is None
    page = su.get(f"/admin/learning/learningcandidate/{candidate.pk}/change/")
    assert page.status_code == 200 and 'name="private_agent"' not in page.content.decode()
