"""Review a pending proposal from the command line, under the review inbox's rules: the proposal is locked, refused
while a reviewer holds it in the inbox (unless that reviewer is the one named by ``--reviewer``), and the decision is
logged as the inbox's and the API's are."""

import json

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from rest_framework.exceptions import ParseError

from common.api import ApplicationError
from common.parsers import INT64_MAX, RefusedValue, check_value, text_problem
from feedback.services.reviews import Reviewer, proposal_approve, proposal_modify, proposal_reject
from review.models import Kind
from review.services import admin_decisions_record, api_decision_begin

_ARGUMENTS = {"modified_action": "--modified-action", "mistake_category": "--category", "notes": "--notes", "id": "proposal"}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _json_argument(text: str):
    """``--modified-action`` parsed with the API's input policy (no NaN or Infinity, finite numbers, 64-bit integers,
    storable strings, limited depth)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise CommandError(f"--modified-action is not valid JSON: {exc}") from exc
    try:
        check_value(value, settings.API_MAX_JSON_DEPTH)
    except RefusedValue as exc:
        raise CommandError(f"--modified-action: {exc.field}: {exc.reason}") from exc
    except ParseError as exc:
        raise CommandError(f"--modified-action: {exc.detail}") from exc
    return value


class Command(BaseCommand):
    help = "Approve, reject or modify a pending proposal from the command line (writes the same feedback records as the API)."

    def add_arguments(self, parser):
        parser.add_argument("proposal", type=int)
        parser.add_argument("decision", choices=["approve", "reject", "modify"])
        parser.add_argument("--notes", default="")
        parser.add_argument("--category", default="", help="Mistake category")
        parser.add_argument("--modified-action", default=None, help="JSON object (for modify)")
        parser.add_argument(
            "--reviewer",
            default=None,
            help="Username of the person deciding (logged as theirs; their own inbox claim does not block)",
        )

    def handle(self, *args, proposal, decision, notes, category, modified_action, **options):
        if not 1 <= proposal <= INT64_MAX:
            raise CommandError(f"proposal must be a positive id (got {proposal}).")
        for argument, text in (("--notes", notes), ("--category", category)):
            problem = text_problem(text)
            if problem:
                raise CommandError(f"{argument}: the value {problem}.")
        user = self._user(options["reviewer"])
        if decision == "modify" and modified_action is None:
            raise CommandError("--modified-action is required for modify.")
        new = _json_argument(modified_action) if decision == "modify" else None
        reviewer = Reviewer(user=user, source="command")
        try:
            with transaction.atomic():
                waiting = api_decision_begin(kind=Kind.PROPOSAL, object_id=proposal, user=user)
                if decision == "approve":
                    p = proposal_approve(proposal=proposal, reviewer=reviewer, notes=notes)
                elif decision == "reject":
                    p = proposal_reject(proposal=proposal, reviewer=reviewer, notes=notes, mistake_category=category)
                else:
                    p = proposal_modify(
                        proposal=proposal, reviewer=reviewer, modified_action=new, notes=notes, mistake_category=category
                    )
                admin_decisions_record(
                    kind=Kind.PROPOSAL, waiting=waiting, user=user, reason=notes, category=category, source="command"
                )
        except ApplicationError as exc:
            argument = _ARGUMENTS.get(exc.field)
            raise CommandError(f"{argument}: {exc.message}" if argument else exc.message) from exc
        self.stdout.write(f"Proposal #{p.pk} is now {p.status}.")

    @staticmethod
    def _user(username: str | None):
        if username is None:
            return None
        problem = text_problem(username)
        if problem:
            raise CommandError(f"--reviewer: the value {problem}.")
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"--reviewer: no active user {username!r}.")
        return user
