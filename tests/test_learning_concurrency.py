"""Concurrent writers on one learning row: blocks and candidate approvals of the same phrase never surface a
unique-constraint race as a 409 or an error."""

import pytest
from rest_framework.test import APIClient

from agents.models import Scope
from learning.models import LearnedPhrase, LearningCandidate, PhraseBlock
from learning.services.candidates import candidate_approve, candidate_record
from learning.services.catalogue import verb_catalogue_load
from tests.conftest import CBU_CATALOGUE, make_client
from tests.test_concurrency import run_concurrently

pytestmark = pytest.mark.django_db(transaction=True)


def test_identical_concurrent_blocks_all_succeed_as_one_row(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    auth = make_client([s.value for s in Scope], name="reviewer-tool")._credentials["HTTP_AUTHORIZATION"]

    def block(i):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=auth)
        response = client.post("/api/v1/blocklist", {"phrase": "wipe units", "verb": "cbu.delete"}, format="json")
        return response.status_code, response.json()

    answers, errors, _ = run_concurrently(block, n=16)
    assert errors == []
    assert sorted(code for code, _ in answers) == [200] * 15 + [201], answers  # one made it; the others found it
    assert PhraseBlock.objects.filter(normalized="wipe units", verb__name="cbu.delete", user_id=None).count() == 1


def test_concurrent_approvals_of_one_phrase_for_different_verbs_all_apply(db):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    verbs = sorted({entry.name for entry in CBU_CATALOGUE})
    candidates = [
        candidate_record(input_pattern="units please", suggested_output=verb, user_id=None, source="test", confidence=0.5)
        for verb in verbs
    ]
    _, errors, _ = run_concurrently(lambda i: candidate_approve(candidate=candidates[i]), n=len(candidates))
    assert errors == []
    assert set(LearningCandidate.objects.values_list("status", flat=True)) == {"applied"}
    assert LearnedPhrase.objects.filter(normalized="units please", user_id=None).count() == 1
