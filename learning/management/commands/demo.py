import logging
import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from agents.models import Agent, Scope
from agents.services import agent_key_create
from learning import datasets
from learning.catalogue import VerbEntry, parse_path
from learning.services.catalogue import verb_catalogue_load

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
        parser.add_argument("--no-admin", action="store_true", help="Do not create the admin user")

    def handle(self, *args, no_key, no_admin, **options):
        if datasets.available():
            entries = banking_entries()
            source = f"BANKING77 from {datasets.banking77_dir()}"
        else:
            entries = parse_path(BUILT_IN)
            source = "the built-in demo catalogue"
        counts = verb_catalogue_load(entries=entries)
        self.stdout.write(f"Loaded {len(entries)} verbs from {source} ({counts['phrases_added']} new phrases).")

        if not no_admin:
            User = get_user_model()
            if not User.objects.filter(username="admin").exists():
                password = os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
                User.objects.create_superuser("admin", "admin@example.com", password)
                self.stdout.write(f"Admin user: admin / {password} (local demo only; change it).")
        if not no_key and not Agent.objects.filter(name="demo-agent").exists():
            _, raw = agent_key_create(agent_name="demo-agent", scopes=[s.value for s in Scope], key_name="demo")
            self.stdout.write(f"Demo agent key (all scopes, shown once): {raw}")
