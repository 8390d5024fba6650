"""The demo workspace (``manage.py demo``): a tenant with a catalogue, an admin, a reviewer and an agent key."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from rest_framework.authtoken.models import Token

from agents.models import Agent, Scope
from agents.services import agent_key_create
from learning.catalogue import VerbEntry
from learning.services.catalogue import verb_catalogue_load
from tenants.context import tenant_scope
from tenants.services import membership_add, tenant_create

# What the demo reviewer may do: see everything reviewers review, decide candidates, transitions and rules.
REVIEWER_PERMISSIONS = [
    "review_learningcandidate",
    "approve_autonomytransition",
    "approve_correctionrule",
    "view_learningcandidate",
    "view_learnedphrase",
    "view_verb",
    "view_disambiguationrequest",
    "view_proposal",
    "change_proposal",
    "view_execution",
    "change_execution",
    "view_feedbackrecord",
    "view_mistakepattern",
    "view_correctionrule",
    "change_correctionrule",
    "view_autonomytransition",
    "change_autonomytransition",
    "view_calibrationrecord",
    "view_episode",
    "view_memory",
    "view_memoryquarantine",
    "view_action",
]


@dataclass
class DemoWorkspace:
    tenant: object
    counts: dict
    admin_created: bool = False
    reviewer_token: str | None = None  # set when the reviewer was created now
    agent_key: str | None = None  # the raw key, when created now (shown once)


def demo_workspace_create(
    *, tenant_slug: str, entries: list[VerbEntry], password: str | None, with_key: bool, progress: bool = False
) -> DemoWorkspace:
    """Create (or complete) the demo workspace in one transaction: the tenant, its catalogue, with ``password`` the
    users ``admin`` (superuser) and ``reviewer`` (staff, the reviewer permissions, a member of the tenant, an API
    token), and with ``with_key`` an agent ``demo-agent`` with a key of every scope. What exists already is kept,
    so running it again adds only what is missing; a failure leaves nothing of this run behind. The catalogue is
    embedded inside that transaction (a demo catalogue takes seconds); the prior is fitted once it commits."""
    with transaction.atomic():
        workspace = tenant_create(slug=tenant_slug)
        with tenant_scope([workspace.pk]):
            counts = verb_catalogue_load(entries=entries, progress=progress)
        out = DemoWorkspace(tenant=workspace, counts=counts)
        if password is not None:
            User = get_user_model()
            if not User.objects.filter(username="admin").exists():
                User.objects.create_superuser("admin", "admin@example.com", password)
                out.admin_created = True
            reviewer = User.objects.filter(username="reviewer").first()
            if reviewer is None:
                reviewer = User.objects.create_user("reviewer", "reviewer@example.com", password, is_staff=True)
                reviewer.user_permissions.set(Permission.objects.filter(codename__in=REVIEWER_PERMISSIONS))
                out.reviewer_token = Token.objects.get_or_create(user=reviewer)[0].key
            membership_add(user=reviewer, tenant=workspace)  # an existing reviewer joins each new demo tenant too
        if with_key and not Agent.objects.filter(name="demo-agent", tenant=workspace).exists():
            _, out.agent_key = agent_key_create(
                agent_name="demo-agent", scopes=[s.value for s in Scope], key_name="demo", tenant=workspace
            )
    return out
