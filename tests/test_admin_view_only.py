"""Pages a reviewer who may only view opens: every field read-only, never a server error."""

import uuid

import pytest
from django.utils import timezone

from actions.models import Action
from agents.models import Agent
from feedback.models import MistakePattern
from learning.models import DisambiguationRequest
from tests.conftest import reviewer_user
from tests.test_review_inbox import signed_in

pytestmark = pytest.mark.django_db


def test_a_reviewer_who_may_only_view_patterns_sees_one_read_only():
    now = timezone.now()
    pattern = MistakePattern.objects.create(
        agent=Agent.objects.create(name="ops-bot"),
        action=Action.objects.create(name="email.send"),
        category="wrong_recipient",
        description="sent to the wrong list",
        occurrence_count=3,
        first_seen=now,
        last_seen=now,
    )
    viewer = signed_in(reviewer_user("vera", "view_mistakepattern"))
    page = viewer.get(f"/admin/feedback/mistakepattern/{pattern.pk}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "sent to the wrong list" in body and 'name="status"' not in body and 'name="_save"' not in body


def test_the_requests_list_shows_an_option_stored_without_a_score():
    """Options written by an older version or by hand (no score, no display name) are shown, not a 500."""
    DisambiguationRequest.objects.create(
        request_id=uuid.uuid4(), text="list the units", normalized="list the units", options=[{"verb": "cbu.list"}]
    )
    root = signed_in(reviewer_user("root", superuser=True))
    listing = root.get("/admin/learning/disambiguationrequest/")
    assert listing.status_code == 200 and "cbu.list (0.00)" in listing.content.decode()
