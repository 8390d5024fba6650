"""Feedback API (thin: validate, call a service, shape the answer)."""

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------

from drf_spectacular.utils import OpenApiParameter, extend_schema  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from autonomy.authentication import ScopePermission  # noqa: E402
from config.schema import ERROR_RESPONSES, ErrorSerializer  # noqa: E402
from feedback.serializers import (  # noqa: E402
    DisambiguationAbandonSerializer,
    DisambiguationAnswerSerializer,
    DisambiguationConflictSerializer,
    DisambiguationSelectSerializer,
)
from feedback.services import disambiguation_abandon, disambiguation_select  # noqa: E402

_REQUEST_ID = OpenApiParameter("request_id", str, OpenApiParameter.PATH, description="The request_id of an ambiguous resolve answer")
_DISAMBIGUATION_ERRORS = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: DisambiguationConflictSerializer}


def selection_answer(row) -> dict:
    return {"request_id": str(row.request_id), "status": row.status, "selected_verb": row.selected_verb, "args": row.selected_args}


def abandon_answer(row) -> dict:
    return {"request_id": str(row.request_id), "status": row.status, "selected_verb": None, "reason": row.abandon_event.reason}


class DisambiguationSelectApi(APIView):
    """The user picked one of the options: answers the verb to run and learns from the choice."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(
        parameters=[_REQUEST_ID], request=DisambiguationSelectSerializer,
        responses={200: DisambiguationAnswerSerializer, **_DISAMBIGUATION_ERRORS},
    )
    def post(self, request, request_id):
        serializer = DisambiguationSelectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        row = disambiguation_select(
            request_id=request_id, selected_verb=data["selected_verb"], args=data.get("args"),
            agent_id=request.user.pk, user_id=data.get("user_id"),
        )
        return Response(selection_answer(row))


class DisambiguationAbandonApi(APIView):
    """The user left the options unanswered (typed something else, closed the session, timed out)."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(
        parameters=[_REQUEST_ID], request=DisambiguationAbandonSerializer,
        responses={200: DisambiguationAnswerSerializer, **_DISAMBIGUATION_ERRORS},
    )
    def post(self, request, request_id):
        serializer = DisambiguationAbandonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = disambiguation_abandon(
            request_id=request_id, reason=serializer.validated_data["reason"], agent_id=request.user.pk,
            user_id=serializer.validated_data.get("user_id"),
        )
        return Response(abandon_answer(row))


# --- out: proposals, executions, outcomes, corrections, feedback records, patterns (issues 6-7) ---
# Agents (feedback scope) create and read their own objects; review tools (governance
# scope, another agent's key) review them. Another agent's object answers 404.

from drf_spectacular.utils import inline_serializer as _out_inline  # noqa: E402
from rest_framework import serializers as _out_serializers  # noqa: E402
from rest_framework import status as _out_http  # noqa: E402

from feedback import selectors as _out_sel  # noqa: E402
from feedback import serializers as _out_ser  # noqa: E402
from feedback import services as _out_svc  # noqa: E402

_OUT_ERRORS = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: ErrorSerializer}
_ID = OpenApiParameter("pk", int, OpenApiParameter.PATH, description="Id")


def _out_page(request, qs, serializer_cls, filter_help=None):
    q = _out_ser.ListQuerySerializer(data=request.query_params)
    q.is_valid(raise_exception=True)
    rows = qs
    total = rows.count()
    limit, offset = q.validated_data["limit"], q.validated_data["offset"]
    return Response({"count": total, "results": serializer_cls(rows[offset:offset + limit], many=True).data})


def _out_list_schema(serializer_cls, name):
    return _out_inline(name=name, fields={"count": _out_serializers.IntegerField(), "results": serializer_cls(many=True)})


_LIST_PARAMS = [_out_ser.ListQuerySerializer]


class _OutAgentApi(APIView):
    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]


class _OutReviewApi(APIView):
    permission_classes = [ScopePermission]
    required_scopes = ["governance"]

    def reviewer(self, request):
        return _out_svc.Reviewer(key=request.auth, source="api")


class ProposalListCreateApi(_OutAgentApi):
    @extend_schema(request=_out_ser.ProposalCreateSerializer, responses={201: _out_ser.ProposalSerializer, **_OUT_ERRORS},
                   summary="Propose an action (unknown actions are registered at level 1)")
    def post(self, request):
        s = _out_ser.ProposalCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        proposal = _out_svc.proposal_create(agent=request.user, **s.validated_data)
        return Response(_out_ser.ProposalSerializer(proposal).data, status=_out_http.HTTP_201_CREATED)

    @extend_schema(parameters=_LIST_PARAMS, responses={200: _out_list_schema(_out_ser.ProposalSerializer, "ProposalList"), **_OUT_ERRORS},
                   summary="Your proposals", operation_id="proposals_list")
    def get(self, request):
        return _out_page(request, _out_sel.proposal_list(agent=request.user, filters=request.query_params), _out_ser.ProposalSerializer)


class ProposalDetailApi(_OutAgentApi):
    @extend_schema(parameters=[_ID], responses={200: _out_ser.ProposalSerializer, **_OUT_ERRORS}, summary="One of your proposals")
    def get(self, request, pk):
        return Response(_out_ser.ProposalSerializer(_out_sel.proposal_get(agent=request.user, pk=pk)).data)


class ProposalApproveApi(_OutReviewApi):
    @extend_schema(parameters=[_ID], request=_out_ser.ReviewSerializer, responses={200: _out_ser.ProposalSerializer, **_OUT_ERRORS},
                   summary="Approve a pending proposal (governance)")
    def post(self, request, pk):
        s = _out_ser.ReviewSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = _out_svc.proposal_approve(proposal=pk, reviewer=self.reviewer(request), notes=s.validated_data["review_notes"])
        return Response(_out_ser.ProposalSerializer(p).data)


class ProposalRejectApi(_OutReviewApi):
    @extend_schema(parameters=[_ID], request=_out_ser.ReviewSerializer, responses={200: _out_ser.ProposalSerializer, **_OUT_ERRORS},
                   summary="Reject a pending proposal; writes a rejection feedback record (governance)")
    def post(self, request, pk):
        s = _out_ser.ReviewSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = _out_svc.proposal_reject(proposal=pk, reviewer=self.reviewer(request), notes=s.validated_data["review_notes"],
                                     mistake_category=s.validated_data["mistake_category"])
        return Response(_out_ser.ProposalSerializer(p).data)


class ProposalModifyApi(_OutReviewApi):
    @extend_schema(parameters=[_ID], request=_out_ser.ModifySerializer, responses={200: _out_ser.ProposalSerializer, **_OUT_ERRORS},
                   summary="Modify a pending proposal; writes a correction record with the delta (governance)")
    def post(self, request, pk):
        s = _out_ser.ModifySerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = _out_svc.proposal_modify(proposal=pk, reviewer=self.reviewer(request), modified_action=s.validated_data["modified_action"],
                                     notes=s.validated_data["review_notes"], mistake_category=s.validated_data["mistake_category"])
        return Response(_out_ser.ProposalSerializer(p).data)


class ExecutionListCreateApi(_OutAgentApi):
    @extend_schema(request=_out_ser.ExecutionCreateSerializer, responses={201: _out_ser.ExecutionSerializer, **_OUT_ERRORS},
                   summary="Record an action you ran alone (action at level 2 or 3)")
    def post(self, request):
        s = _out_ser.ExecutionCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        execution = _out_svc.execution_create(agent=request.user, **s.validated_data)
        return Response(_out_ser.ExecutionSerializer(execution).data, status=_out_http.HTTP_201_CREATED)

    @extend_schema(parameters=_LIST_PARAMS, responses={200: _out_list_schema(_out_ser.ExecutionSerializer, "ExecutionList"), **_OUT_ERRORS},
                   summary="Your executions (status filters the review outcome)", operation_id="executions_list")
    def get(self, request):
        return _out_page(request, _out_sel.execution_list(agent=request.user, filters=request.query_params), _out_ser.ExecutionSerializer)


class ExecutionDetailApi(_OutAgentApi):
    @extend_schema(parameters=[_ID], responses={200: _out_ser.ExecutionSerializer, **_OUT_ERRORS}, summary="One of your executions")
    def get(self, request, pk):
        return Response(_out_ser.ExecutionSerializer(_out_sel.execution_get(agent=request.user, pk=pk)).data)


class ExecutionReviewApi(_OutReviewApi):
    @extend_schema(parameters=[_ID], request=_out_ser.ExecutionReviewSerializer,
                   responses={200: _out_ser.ExecutionSerializer, **_OUT_ERRORS},
                   summary="Review an execution correct or incorrect; writes a feedback record (governance)")
    def post(self, request, pk):
        s = _out_ser.ExecutionReviewSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        e = _out_svc.execution_review(execution=pk, reviewer=self.reviewer(request), outcome=d["outcome"], notes=d["review_notes"],
                                      corrected_action=d["corrected_action"], mistake_category=d["mistake_category"])
        return Response(_out_ser.ExecutionSerializer(e).data)


class OutcomeApi(_OutAgentApi):
    @extend_schema(request=_out_ser.OutcomeSerializer, responses={200: _out_ser.ProposalSerializer, **_OUT_ERRORS},
                   summary="Report how your approved proposal ended (completed or failed)")
    def post(self, request):
        s = _out_ser.OutcomeSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        p = _out_svc.proposal_outcome_record(
            agent=request.user, proposal_id=d["proposal"], success=d["success"], result=d["result"], error=d["error"],
            explanation=d["explanation"], mistake_category=d["mistake_category"], reviewer=_out_svc.Reviewer(key=request.auth),
        )
        return Response(_out_ser.ProposalSerializer(p).data)


class ManualCorrectionApi(_OutAgentApi):
    @extend_schema(request=_out_ser.ManualCorrectionSerializer, responses={201: _out_ser.FeedbackRecordSerializer, **_OUT_ERRORS},
                   summary="Record a manual override of what the agent did or proposed")
    def post(self, request):
        s = _out_ser.ManualCorrectionSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        record = _out_svc.manual_override_record(
            agent=request.user, action=d["action"], original_action=d["original_action"], corrected_action=d["corrected_action"],
            explanation=d["explanation"], confidence=d["confidence"], context=d["context"], proposal_id=d["proposal"],
            execution_id=d["execution"], mistake_category=d["mistake_category"], reviewer=_out_svc.Reviewer(key=request.auth),
        )
        return Response(_out_ser.FeedbackRecordSerializer(record).data, status=_out_http.HTTP_201_CREATED)


class FeedbackRecordListApi(_OutAgentApi):
    @extend_schema(parameters=_LIST_PARAMS,
                   responses={200: _out_list_schema(_out_ser.FeedbackRecordSerializer, "FeedbackRecordList"), **_OUT_ERRORS},
                   summary="Feedback on your actions (status filters the pattern status)")
    def get(self, request):
        qs = _out_sel.feedback_record_list(agent=request.user, filters=request.query_params)
        return _out_page(request, qs, _out_ser.FeedbackRecordSerializer)


class MistakePatternListApi(_OutAgentApi):
    @extend_schema(parameters=_LIST_PARAMS,
                   responses={200: _out_list_schema(_out_ser.MistakePatternSerializer, "MistakePatternList"), **_OUT_ERRORS},
                   summary="Your repeated-mistake patterns")
    def get(self, request):
        qs = _out_sel.mistake_pattern_list(agent=request.user, filters=request.query_params).order_by("-last_seen", "-id")
        return _out_page(request, qs, _out_ser.MistakePatternSerializer)
