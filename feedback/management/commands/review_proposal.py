import json

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from feedback.services.reviews import Reviewer, proposal_approve, proposal_modify, proposal_reject


class Command(BaseCommand):
    help = "Approve, reject or modify a pending proposal from the command line (writes the same feedback records as the API)."

    def add_arguments(self, parser):
        parser.add_argument("proposal", type=int)
        parser.add_argument("decision", choices=["approve", "reject", "modify"])
        parser.add_argument("--notes", default="")
        parser.add_argument("--category", default="", help="Mistake category")
        parser.add_argument("--modified-action", default=None, help="JSON object (for modify)")

    def handle(self, *args, proposal, decision, notes, category, modified_action, **options):

        reviewer = Reviewer(source="command")
        try:
            if decision == "approve":
                p = proposal_approve(proposal=proposal, reviewer=reviewer, notes=notes)
            elif decision == "reject":
                p = proposal_reject(proposal=proposal, reviewer=reviewer, notes=notes, mistake_category=category)
            else:
                if modified_action is None:
                    raise CommandError("--modified-action is required for modify.")
                try:
                    new = json.loads(modified_action)
                except json.JSONDecodeError as exc:
                    raise CommandError(f"--modified-action is not valid JSON: {exc}") from exc
                p = proposal_modify(
                    proposal=proposal, reviewer=reviewer, modified_action=new, notes=notes, mistake_category=category
                )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Proposal #{p.pk} is now {p.status}.")
