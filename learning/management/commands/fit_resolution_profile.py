"""Fit resolve threshold and margin on gold labels; the result is proposed, a reviewer activates it in the admin."""

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from learning.services.profiles import resolution_profile_activate, resolution_profile_fit


class Command(BaseCommand):
    help = "Fit the resolve threshold and margin on clicks and corrections (held-out share measured); stored as proposed."

    def add_arguments(self, parser):
        parser.add_argument("--held-out-share", type=float, default=None)
        parser.add_argument("--max-wrong-pct", type=float, default=None)
        parser.add_argument("--activate", action="store_true", help="Put the fitted profile live at once (no review)")

    def handle(self, *args, **options):
        try:
            row = resolution_profile_fit(held_out_share=options["held_out_share"], max_wrong_pct=options["max_wrong_pct"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"fitted on {row.train_count} labels, measured on {row.held_out_count} held out: threshold {row.resolve_threshold}, "
            f"margin {row.margin} (in force: {row.baseline})\n"
            f"held-out with the profile in force: {row.held_out_current}\nheld-out with the fitted profile:  {row.held_out_fitted}"
        )
        if options["activate"]:
            resolution_profile_activate(fitted=row)
            self.stdout.write(self.style.SUCCESS(f"profile {row.pk} is live"))
        else:
            self.stdout.write(f"profile {row.pk} proposed; activate it in the admin (Fitted resolution profiles)")
