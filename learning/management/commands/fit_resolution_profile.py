"""Fit one tenant's resolve threshold and margin on its gold labels; the result is proposed, a reviewer activates
it in the admin."""

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from learning.services.profiles import resolution_profile_activate, resolution_profile_fit
from tenants.context import DEFAULT_SLUG, tenant_session
from tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Fit the resolve threshold and margin on clicks and corrections (held-out share measured); stored as proposed."

    def add_arguments(self, parser):
        parser.add_argument("--held-out-share", type=float, default=None, help="Share of labels held out, above 0 and below 1")
        parser.add_argument(
            "--max-wrong-pct", type=float, default=None, help="Most wrong answers allowed, in percent (above 0, below 100)"
        )
        parser.add_argument("--activate", action="store_true", help="Put the fitted profile live at once (no review)")
        parser.add_argument(
            "--tenant", default=DEFAULT_SLUG, help="Slug of the tenant whose labels are fitted (default: %(default)s)"
        )

    def handle(self, *args, **options):
        share, pct = options["held_out_share"], options["max_wrong_pct"]
        if share is not None and not 0.0 < share < 1.0:  # NaN fails the comparison too
            raise CommandError(f"--held-out-share must be above 0 and below 1, not {share}.")
        if pct is not None and not 0.0 < pct < 100.0:
            raise CommandError(f"--max-wrong-pct must be a percentage above 0 and below 100, not {pct}.")
        workspace = tenant_get(slug=options["tenant"])
        if workspace is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        with tenant_session([workspace.pk]):  # that tenant's labels only, and the profile is stored in it
            try:
                row = resolution_profile_fit(held_out_share=options["held_out_share"], max_wrong_pct=options["max_wrong_pct"])
            except ApplicationError as exc:
                raise CommandError(exc.message) from exc
            if options["activate"]:
                resolution_profile_activate(fitted=row)
        self.stdout.write(
            f"fitted on {row.train_count} labels, measured on {row.held_out_count} held out: threshold {row.resolve_threshold}, "
            f"margin {row.margin} (in force: {row.baseline})\n"
            f"held-out with the profile in force: {row.held_out_current}\nheld-out with the fitted profile:  {row.held_out_fitted}"
        )
        if options["activate"]:
            self.stdout.write(self.style.SUCCESS(f"profile {row.pk} is live in {workspace.slug}"))
        else:
            self.stdout.write(f"profile {row.pk} proposed; activate it in the admin (Fitted resolution profiles)")
