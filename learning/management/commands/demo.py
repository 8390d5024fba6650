import logging
import os

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from learning import datasets
from learning.catalogue import VerbEntry, parse_path
from learning.services.demo import demo_workspace_create
from tenants.models import DEFAULT_SLUG

logger = logging.getLogger(__name__)
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
        if datasets.available():
            entries = banking_entries()
            source = f"BANKING77 from {datasets.banking77_dir()}"
        else:
            entries = parse_path(BUILT_IN)
            source = "the built-in demo catalogue"
        password = None if no_admin else os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
        try:
            demo = demo_workspace_create(
                tenant_slug=tenant, entries=entries, password=password, with_key=not no_key, progress=True
            )
        except ApplicationError as exc:
            raise CommandError(f"--tenant: {exc.message}" if exc.field == "slug" else exc.message) from exc
        slug = demo.tenant.slug
        self.stdout.write(
            f"Tenant {slug!r}: loaded {len(entries)} verbs from {source} ({demo.counts['phrases_added']} new phrases)."
        )
        if demo.admin_created:
            self.stdout.write(f"Admin user: admin / {password} (local demo only; change it).")
        if demo.reviewer_token:
            self.stdout.write(
                f"Reviewer of {slug!r}: reviewer / {password}; reviewer token (Authorization: Token ...): {demo.reviewer_token}"
            )
        if demo.agent_key:
            self.stdout.write(f"Demo agent key of {slug!r} (all scopes, shown once): {demo.agent_key}")
