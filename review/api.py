"""The API's decisions on items the review inbox shows, under the inbox's rules.

Candidates, proposals, executions and autonomy transitions can be decided through the API (an agent's governance
key, or a reviewer's token) as well as in the inbox and the admin pages. These views are the owning apps' own
views with two steps added in the request's transaction: before the decision the item is locked as the inbox
locks it and refused (409 ``claimed``) while another reviewer holds it there; after the decision it is logged as a
``Decision`` (by the reviewer, or by the agent whose key decided) and its claims go.
"""

from agents.models import Agent
from autonomy import api as autonomy_api
from feedback import api as feedback_api
from learning import api as learning_api
from review import services
from review.models import Kind

REASON_FIELDS = ("reason", "notes", "review_notes")
CATEGORY_FIELDS = ("mistake_category", "category")


def _text(data, names) -> str:
    """The first non-empty text among ``names`` in a JSON body (the view validates the body itself)."""
    if not isinstance(data, dict):
        return ""
    return next((v for v in (data.get(n) for n in names) if isinstance(v, str) and v.strip()), "")


class InboxRules:
    """A decision view's POST locks its item, honours the inbox's claims and logs the decision."""

    review_kind = ""
    review_id_kwarg = "pk"
    _waiting = None

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles, Idempotency-Key
        if request.method == "POST":
            person = None if isinstance(request.user, Agent) else request.user
            self._waiting = (
                person,
                services.api_decision_begin(kind=self.review_kind, object_id=kwargs[self.review_id_kwarg], user=person),
            )

    def finalize_response(self, request, response, *args, **kwargs):
        begun, self._waiting = self._waiting, None
        if begun is not None and begun[1] and 200 <= response.status_code < 300:
            person, waiting = begun
            services.admin_decisions_record(
                kind=self.review_kind,
                waiting=waiting,
                user=person,
                agent=request.user if person is None else None,
                reason=_text(request.data, REASON_FIELDS),
                category=_text(request.data, CATEGORY_FIELDS),
                source="api",
            )
        return super().finalize_response(request, response, *args, **kwargs)


class CandidateApproveApi(InboxRules, learning_api.CandidateApproveApi):
    review_kind, review_id_kwarg = Kind.CANDIDATE, "candidate_id"


class CandidateRejectApi(InboxRules, learning_api.CandidateRejectApi):
    review_kind, review_id_kwarg = Kind.CANDIDATE, "candidate_id"


class ProposalApproveApi(InboxRules, feedback_api.ProposalApproveApi):
    review_kind = Kind.PROPOSAL


class ProposalRejectApi(InboxRules, feedback_api.ProposalRejectApi):
    review_kind = Kind.PROPOSAL


class ProposalModifyApi(InboxRules, feedback_api.ProposalModifyApi):
    review_kind = Kind.PROPOSAL


class ExecutionReviewApi(InboxRules, feedback_api.ExecutionReviewApi):
    review_kind = Kind.EXECUTION


class TransitionApproveApi(InboxRules, autonomy_api.TransitionApproveApi):
    review_kind = Kind.TRANSITION


class TransitionRejectApi(InboxRules, autonomy_api.TransitionRejectApi):
    review_kind = Kind.TRANSITION
