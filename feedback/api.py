"""The feedback API: proposals, executions, outcomes, manual overrides, feedback records and mistake patterns."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers as drf_serializers
from rest_framework import status
from rest_framework.response import Response

from agents.api import TenantApiView
from agents.authentication import ScopePermission
from common.fields import NoQuerySerializer
from common.schema import ERROR_RESPONSES, ErrorSerializer
from feedback import selectors, serializers
from feedback.models import PatternStatus, ProposalStatus, ReviewOutcome
from feedback.services.reviews import (
    Reviewer,
    execution_create,
    execution_review,
    manual_override_record,
    proposal_approve,
    proposal_create,
    proposal_modify,
    proposal_outcome_record,
    proposal_reject,
)

# Agents (feedback scope) create and read their own objects; review tools (governance
# scope, another agent's key) review them. Another agent's object answers 404.


_OUT_ERRORS = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: ErrorSerializer}
_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="Id")


def _page(request, qs, serializer_cls, statuses=(), query=serializers.ListQuerySerializer):
    """One page of ``qs``; ``status`` must be one of ``statuses`` (a misspelt filter is 400, not an empty list), and
    a filter the list does not have (``query``: its parameters) is 400, not ignored."""
    q = query(data=request.query_params)
    q.is_valid(raise_exception=True)
    status_value = q.validated_data.get("status") or ""
    if status_value and status_value not in statuses:
        raise drf_serializers.ValidationError({"status": [f"Unknown status {status_value!r}; one of {', '.join(statuses)}."]})
    rows = qs
    total = rows.count()
    limit, offset = q.validated_data["limit"], q.validated_data["offset"]
    return Response({"count": total, "results": serializer_cls(rows[offset : offset + limit], many=True).data})


def _list_schema(serializer_cls, name):
    return inline_serializer(name=name, fields={"count": drf_serializers.IntegerField(), "results": serializer_cls(many=True)})


_LIST_PARAMS = [serializers.ListQuerySerializer]
_PROPOSAL_LIST_PARAMS = [serializers.ProposalListQuerySerializer]


class AgentApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]


class ReviewApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["governance"]

    def reviewer(self, request):
        return Reviewer(key=request.auth, source="api")


class ProposalListCreateApi(AgentApi):
    @extend_schema(
        request=serializers.ProposalCreateSerializer,
        responses={201: serializers.ProposalSerializer, **_OUT_ERRORS},
        summary="Propose an action (unknown actions are registered at level 1)",
    )
    def post(self, request):
        s = serializers.ProposalCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        proposal = proposal_create(agent=request.user, **s.validated_data)
        return Response(serializers.ProposalSerializer(proposal).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=_PROPOSAL_LIST_PARAMS,
        responses={200: _list_schema(serializers.ProposalSerializer, "ProposalList"), **_OUT_ERRORS},
        summary="Your proposals",
        operation_id="proposals_list",
    )
    def get(self, request):
        return _page(
            request,
            selectors.proposal_list(agent=request.user, filters=request.query_params),
            serializers.ProposalSerializer,
            statuses=ProposalStatus.values,
            query=serializers.ProposalListQuerySerializer,
        )


class ProposalDetailApi(AgentApi):
    @extend_schema(
        parameters=[_ID], responses={200: serializers.ProposalSerializer, **_OUT_ERRORS}, summary="One of your proposals"
    )
    def get(self, request, pk):
        NoQuerySerializer.check(request)
        return Response(serializers.ProposalSerializer(selectors.proposal_get(agent=request.user, pk=pk)).data)


class ProposalApproveApi(ReviewApi):
    @extend_schema(
        parameters=[_ID],
        request=serializers.ApproveSerializer,
        responses={200: serializers.ProposalSerializer, **_OUT_ERRORS},
        summary="Approve a pending proposal (governance)",
    )
    def post(self, request, pk):
        s = serializers.ApproveSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = proposal_approve(proposal=pk, reviewer=self.reviewer(request), notes=s.validated_data["review_notes"])
        return Response(serializers.ProposalSerializer(p).data)


class ProposalRejectApi(ReviewApi):
    @extend_schema(
        parameters=[_ID],
        request=serializers.ReviewSerializer,
        responses={200: serializers.ProposalSerializer, **_OUT_ERRORS},
        summary="Reject a pending proposal; writes a rejection feedback record (governance)",
    )
    def post(self, request, pk):
        s = serializers.ReviewSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = proposal_reject(
            proposal=pk,
            reviewer=self.reviewer(request),
            notes=s.validated_data["review_notes"],
            mistake_category=s.validated_data["mistake_category"],
        )
        return Response(serializers.ProposalSerializer(p).data)


class ProposalModifyApi(ReviewApi):
    @extend_schema(
        parameters=[_ID],
        request=serializers.ModifySerializer,
        responses={200: serializers.ProposalSerializer, **_OUT_ERRORS},
        summary="Modify a pending proposal; writes a correction record with the delta (governance)",
    )
    def post(self, request, pk):
        s = serializers.ModifySerializer(data=request.data)
        s.is_valid(raise_exception=True)
        p = proposal_modify(
            proposal=pk,
            reviewer=self.reviewer(request),
            modified_action=s.validated_data["modified_action"],
            notes=s.validated_data["review_notes"],
            mistake_category=s.validated_data["mistake_category"],
        )
        return Response(serializers.ProposalSerializer(p).data)


class ExecutionListCreateApi(AgentApi):
    @extend_schema(
        request=serializers.ExecutionCreateSerializer,
        responses={201: serializers.ExecutionSerializer, **_OUT_ERRORS},
        summary="Record an action you ran alone (action at level 2 or 3)",
    )
    def post(self, request):
        s = serializers.ExecutionCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        execution = execution_create(agent=request.user, **s.validated_data)
        return Response(serializers.ExecutionSerializer(execution).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=_PROPOSAL_LIST_PARAMS,
        responses={200: _list_schema(serializers.ExecutionSerializer, "ExecutionList"), **_OUT_ERRORS},
        summary="Your executions (status filters the review outcome)",
        operation_id="executions_list",
    )
    def get(self, request):
        return _page(
            request,
            selectors.execution_list(agent=request.user, filters=request.query_params),
            serializers.ExecutionSerializer,
            statuses=ReviewOutcome.values,
            query=serializers.ProposalListQuerySerializer,
        )


class ExecutionDetailApi(AgentApi):
    @extend_schema(
        parameters=[_ID], responses={200: serializers.ExecutionSerializer, **_OUT_ERRORS}, summary="One of your executions"
    )
    def get(self, request, pk):
        NoQuerySerializer.check(request)
        return Response(serializers.ExecutionSerializer(selectors.execution_get(agent=request.user, pk=pk)).data)


class ExecutionReviewApi(ReviewApi):
    @extend_schema(
        parameters=[_ID],
        request=serializers.ExecutionReviewSerializer,
        responses={200: serializers.ExecutionSerializer, **_OUT_ERRORS},
        summary="Review an execution correct or incorrect; writes a feedback record (governance)",
    )
    def post(self, request, pk):
        s = serializers.ExecutionReviewSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        e = execution_review(
            execution=pk,
            reviewer=self.reviewer(request),
            outcome=d["outcome"],
            notes=d["review_notes"],
            corrected_action=d["corrected_action"],
            mistake_category=d["mistake_category"],
        )
        return Response(serializers.ExecutionSerializer(e).data)


class OutcomeApi(AgentApi):
    @extend_schema(
        request=serializers.OutcomeSerializer,
        responses={200: serializers.ProposalSerializer, **_OUT_ERRORS},
        summary="Report how your approved proposal ended (completed or failed)",
    )
    def post(self, request):
        s = serializers.OutcomeSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        p = proposal_outcome_record(
            agent=request.user,
            proposal_id=d["proposal"],
            success=d["success"],
            result=d["result"],
            error=d["error"],
            explanation=d["explanation"],
            mistake_category=d["mistake_category"],
            reviewer=Reviewer(key=request.auth),
        )
        return Response(serializers.ProposalSerializer(p).data)


class OverrideApi(AgentApi):
    @extend_schema(
        request=serializers.OverrideSerializer,
        responses={201: serializers.FeedbackRecordSerializer, **_OUT_ERRORS},
        summary="Record a manual override of what the agent did or proposed",
    )
    def post(self, request):
        s = serializers.OverrideSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        record = manual_override_record(
            agent=request.user,
            action=d["action"],
            original_action=d["original_action"],
            corrected_action=d["corrected_action"],
            explanation=d["explanation"],
            confidence=d["confidence"],
            context=d["context"],
            proposal_id=d["proposal"],
            execution_id=d["execution"],
            mistake_category=d["mistake_category"],
            reviewer=Reviewer(key=request.auth),
        )
        return Response(serializers.FeedbackRecordSerializer(record).data, status=status.HTTP_201_CREATED)


class FeedbackRecordListApi(AgentApi):
    @extend_schema(
        parameters=_LIST_PARAMS,
        responses={200: _list_schema(serializers.FeedbackRecordSerializer, "FeedbackRecordList"), **_OUT_ERRORS},
        summary="Feedback on your actions (status filters the pattern status)",
    )
    def get(self, request):
        qs = selectors.feedback_record_list(agent=request.user, filters=request.query_params)
        return _page(request, qs, serializers.FeedbackRecordSerializer, statuses=PatternStatus.values)


class MistakePatternListApi(AgentApi):
    @extend_schema(
        parameters=_LIST_PARAMS,
        responses={200: _list_schema(serializers.MistakePatternSerializer, "MistakePatternList"), **_OUT_ERRORS},
        summary="Your repeated-mistake patterns",
    )
    def get(self, request):
        qs = selectors.mistake_pattern_list(agent=request.user, filters=request.query_params).order_by("-last_seen", "-id")
        return _page(request, qs, serializers.MistakePatternSerializer, statuses=PatternStatus.values)
