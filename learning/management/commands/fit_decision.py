"""Fit the auto-resolve decision now: the catalogue prior (--prior, or when none exists) and a fit of the users'
labels, which runs in shadow and goes live automatically once it meets the promotion rule (docs/thresholds.md)."""

from django.core.management.base import BaseCommand, CommandError

from learning.services.decisions import decision_prior_fit, decision_refit
from tenants.context import DEFAULT_SLUG, tenant_session
from tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Refit the learned auto-resolve decision (prior and labels) of one tenant; new fits run in shadow first."

    def add_arguments(self, parser):
        parser.add_argument("--prior", action="store_true", help="Recompute the catalogue prior from the catalogue")
        parser.add_argument("--force", action="store_true", help="Fit even below the minimum number of labels (never promoted)")
        parser.add_argument(
            "--tenant", default=DEFAULT_SLUG, help="Slug of the tenant whose decision it is (default: %(default)s)"
        )

    def handle(self, *args, tenant, **options):
        workspace = tenant_get(slug=tenant)
        if workspace is None:
            raise CommandError(f"No tenant {tenant!r}.")
        with tenant_session([workspace.pk]):  # the tenant's phrases and labels only; each fit commits on its own
            if options["prior"]:
                fit = decision_prior_fit(progress=True)
                self.stdout.write(f"prior: {fit if fit else 'catalogue too small for a prior'}")
                if fit:
                    self.stdout.write(f"  held out on the catalogue: {fit.held_out}, cut {fit.params.get('cut')}")
            out = decision_refit(force=options["force"], progress=True)
        self.stdout.write(f"refit: {out}")
