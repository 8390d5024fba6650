import logging
import os

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from agents.models import Agent, Scope
from agents.services import agent_key_create
from common.api import ApplicationError
from learning import datasets
from learning.catalogue import VerbEntry, parse_path
from learning.services.catalogue import verb_catalogue_load
from tenants.context import tenant_scope
from tenants.models import DEFAULT_SLUG
from tenants.services import membership_add, tenant_create

logger = logging.getLogger(__name__)
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
BUILT_IN = datasets.Path(__file__).resolve().parents[2] / "fixtures" / "demo_catalogue.yaml"


def banking_entries(per_verb: int = 5, seed: int = 77) -> list[VerbEntry]:
    chosen, _ = datasets.catalogue_split(per_verb=per_verb, seed=seed)
    return [
        VerbEntry(
            name=verb,
            domain=datasets.DOMAIN,
            display_name=verb.split(".", 1)[1].replace("_", " ").capitalize(),
            description=datasets.describe(verb.split(".", 1)[1]),
            phrases=phrases,
        )
        for verb, phrases in sorted(chosen.items())
    ]


class Command(BaseCommand):
    help = (
        "Load a demo catalogue (the 77 BANKING77 intents as banking.<intent> verbs with five phrases each, "
        "or a small built-in catalogue when the data set is absent), a demo agent key and an admin user."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-key", action="store_true", help="Do not create a demo agent key")
        parser.add_argument("--no-admin", action="store_true", help="Do not create the admin and reviewer users")
        parser.add_argument("--tenant", default=DEFAULT_SLUG, help="Slug of the demo's tenant (default: %(default)s)")

    def handle(self, *args, no_key, no_admin, tenant, **options):
        try:
            workspace = tenant_create(slug=tenant)
        except ApplicationError as exc:
            raise CommandError(f"--tenant: {exc.message}") from exc
        if datasets.available():
            entries = banking_entries()
            source = f"BANKING77 from {datasets.banking77_dir()}"
        else:
            entries = parse_path(BUILT_IN)
            source = "the built-in demo catalogue"
        with tenant_scope([workspace.pk]):
            counts = verb_catalogue_load(entries=entries, progress=True)
        self.stdout.write(
            f"Tenant {workspace.slug!r}: loaded {len(entries)} verbs from {source} ({counts['phrases_added']} new phrases)."
        )

        if not no_admin:
            User = get_user_model()
            password = os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
            if not User.objects.filter(username="admin").exists():
                User.objects.create_superuser("admin", "admin@example.com", password)
                self.stdout.write(f"Admin user: admin / {password} (local demo only; change it).")
            if not User.objects.filter(username="reviewer").exists():
                reviewer = User.objects.create_user("reviewer", "reviewer@example.com", password, is_staff=True)
                reviewer.user_permissions.set(Permission.objects.filter(codename__in=REVIEWER_PERMISSIONS))
                membership_add(user=reviewer, tenant=workspace)
                token, _ = Token.objects.get_or_create(user=reviewer)
                self.stdout.write(
                    f"Reviewer of {workspace.slug!r}: reviewer / {password}; reviewer token (Authorization: Token ...): "
                    f"{token.key}"
                )
        if not no_key and not Agent.objects.filter(name="demo-agent", tenant=workspace).exists():
            _, raw = agent_key_create(agent_name="demo-agent", scopes=[s.value for s in Scope], key_name="demo", tenant=workspace)
            self.stdout.write(f"Demo agent key of {workspace.slug!r} (all scopes, shown once): {raw}")
