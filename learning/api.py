"""The learning API: resolve, answers to ambiguous resolutions, corrections and confirmations, and
governance of what is learned (candidates, stats, import, blocklist). Thin: validate, call a service, shape the answer."""

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

from agents.api import TenantApiView
from agents.authentication import ScopePermission
from agents.models import Agent
from common.api import ApplicationError, error_response
from common.parsers import CheckedFormParser, CheckedMultiPartParser, LimitedJSONParser
from common.schema import ERROR_RESPONSES, ErrorSerializer
from common.timing import timed
from learning import selectors
from learning.importing import ImportFormatError, check_size, parse
from learning.resolution import resolve
from learning.serializers import (
    AliasResolveRequestSerializer,
    AliasResolveResponseSerializer,
    BlockCreateSerializer,
    BlockSerializer,
    CandidateApproveSerializer,
    CandidateListQuerySerializer,
    CandidatePageSerializer,
    CandidateRejectSerializer,
    ConfirmationResultSerializer,
    ConfirmationSerializer,
    CorrectionResultSerializer,
    CorrectionSerializer,
    DisambiguationAbandonSerializer,
    DisambiguationAnswerSerializer,
    DisambiguationConflictSerializer,
    DisambiguationSelectSerializer,
    ImportAcceptedSerializer,
    ImportJobSerializer,
    ImportRequestSerializer,
    ImportResultSerializer,
    LearningCandidateSerializer,
    ResolveRequestSerializer,
    ResolveResponseSerializer,
    StatsQuerySerializer,
    StatsSerializer,
)
from learning.services.blocks import phrase_block_add, phrase_block_delete, phrase_block_expire
from learning.services.candidates import candidate_approve, candidate_reject
from learning.services.corrections import phrase_confirmation_apply, phrase_correction_apply
from learning.services.disambiguations import disambiguation_abandon, disambiguation_select, resolution_store
from learning.services.imports import phrase_import_job_create, phrases_import

# Learning API: resolve what a user typed.


class ResolveApi(TenantApiView):
    """Resolve a user's text to a verb, ambiguity options, or no match."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=ResolveRequestSerializer, responses={200: ResolveResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = ResolveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = resolve(**serializer.validated_data)
        with timed("record"):
            resolution_store(resolution=result, agent=request.user, domain=serializer.validated_data.get("domain"))
        body = result.as_dict()
        if result.outcome != "ambiguous":
            body.pop("options")
        for key in ("text", "user_id", "model"):
            body.pop(key)
        return Response(body)


_REQUEST_ID = OpenApiParameter(
    "request_id", str, OpenApiParameter.PATH, description="The request_id of an ambiguous resolve answer"
)
_DISAMBIGUATION_ERRORS = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: DisambiguationConflictSerializer}


def selection_answer(row) -> dict:
    return {
        "request_id": str(row.request_id),
        "status": row.status,
        "selected_verb": row.selected_verb,
        "args": row.selected_args,
    }


def abandon_answer(row) -> dict:
    return {"request_id": str(row.request_id), "status": row.status, "selected_verb": None, "reason": row.abandon_event.reason}


class DisambiguationSelectApi(TenantApiView):
    """The user picked one of the options: answers the verb to run and learns from the choice."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(
        parameters=[_REQUEST_ID],
        request=DisambiguationSelectSerializer,
        responses={200: DisambiguationAnswerSerializer, **_DISAMBIGUATION_ERRORS},
    )
    def post(self, request, request_id):
        serializer = DisambiguationSelectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        row = disambiguation_select(
            request_id=request_id,
            selected_verb=data["selected_verb"],
            args=data.get("args"),
            agent_id=request.user.pk,
            user_id=data.get("user_id"),
        )
        return Response(selection_answer(row))


class DisambiguationAbandonApi(TenantApiView):
    """The user left the options unanswered (typed something else, closed the session, timed out)."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(
        parameters=[_REQUEST_ID],
        request=DisambiguationAbandonSerializer,
        responses={200: DisambiguationAnswerSerializer, **_DISAMBIGUATION_ERRORS},
    )
    def post(self, request, request_id):
        serializer = DisambiguationAbandonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = disambiguation_abandon(
            request_id=request_id,
            reason=serializer.validated_data["reason"],
            agent_id=request.user.pk,
            user_id=serializer.validated_data.get("user_id"),
        )
        return Response(abandon_answer(row))


# Learning-governance API: review candidates, stats, blocklist, corrections, bulk import.
#
# Thin views: validate, call a service or selector, shape the answer. Reviewing, blocking and importing
# need the ``governance`` scope; corrections are feedback (``feedback`` scope).


ERRORS_404_409 = {**ERROR_RESPONSES, 404: ErrorSerializer, 409: ErrorSerializer}


class GovernanceApi(TenantApiView):
    permission_classes = [ScopePermission]
    required_scopes = ["governance"]


class CandidateDecisionApi(GovernanceApi):
    """Decided by a governance key of another agent than the proposer, or by a reviewer's token."""

    reviewer_permissions = ["learning.review_learningcandidate"]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication and permissions first: 401/403 before 404
        # An id no key can hold is unknown (404) before any later step (the review inbox's lock) sends it to SQL.
        if "candidate_id" in kwargs:
            selectors.candidate_id_check(candidate_id=kwargs["candidate_id"])

    def decider(self, request) -> dict:
        if isinstance(request.user, Agent):
            return {"agent": request.user}
        return {"reviewer": request.user}


class CandidatePagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200


class CandidateListApi(CandidateDecisionApi):
    """Learning candidates, pending first, then by occurrences and recency."""

    @extend_schema(parameters=[CandidateListQuerySerializer], responses={200: CandidatePageSerializer, **ERROR_RESPONSES})
    def get(self, request):
        query = CandidateListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        qs = selectors.candidate_list(
            status=q.get("status"),
            candidate_type=q.get("type"),
            min_occurrences=q.get("min_occurrences"),
            risk_level=q.get("risk_level"),
            user_id=q.get("user_id"),
        ).select_related("reviewed_by", "reviewed_by_agent")
        paginator = CandidatePagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(LearningCandidateSerializer(page, many=True).data)


class CandidateApproveApi(CandidateDecisionApi):
    """Approve a candidate; with ``apply_immediately`` (default) write the learned phrase or alias now."""

    @extend_schema(request=CandidateApproveSerializer, responses={200: LearningCandidateSerializer, **ERRORS_404_409})
    def post(self, request, candidate_id: int):
        body = CandidateApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        candidate = selectors.candidate_get(candidate_id=candidate_id)
        done = candidate_approve(
            candidate=candidate, apply_immediately=body.validated_data["apply_immediately"], **self.decider(request)
        )
        return Response(LearningCandidateSerializer(done).data)


class CandidateRejectApi(CandidateDecisionApi):
    """Reject a candidate with a reason; optionally blocklist its phrase for the suggested verb."""

    @extend_schema(request=CandidateRejectSerializer, responses={200: LearningCandidateSerializer, **ERRORS_404_409})
    def post(self, request, candidate_id: int):
        body = CandidateRejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        candidate = selectors.candidate_get(candidate_id=candidate_id)
        done = candidate_reject(candidate=candidate, **self.decider(request), **body.validated_data)
        return Response(LearningCandidateSerializer(done).data)


class LearningStatsApi(GovernanceApi):
    """Candidates by status within the time range, active learnings, top pending phrases."""

    @extend_schema(parameters=[StatsQuerySerializer], responses={200: StatsSerializer, **ERROR_RESPONSES})
    def get(self, request):
        query = StatsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(StatsSerializer(selectors.learning_stats(**query.validated_data)).data)


class BlockCreateApi(GovernanceApi):
    """Block a verb for a phrase and its paraphrases, globally or for one user, optionally for a while."""

    @extend_schema(request=BlockCreateSerializer, responses={201: BlockSerializer, 200: BlockSerializer, **ERROR_RESPONSES})
    def post(self, request):
        body = BlockCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        expires_in = d.get("expires_in")
        block, created = phrase_block_add(
            phrase=d["phrase"],
            verb_name=d["verb"],
            reason=d["reason"],
            user_id=d.get("user_id") if d["scope"] == "user" else None,
            expires_at=timezone.now() + expires_in if expires_in else None,
            source=f"api:{request.user.name}"[:40],
        )
        return Response(BlockSerializer(block).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class BlockDetailApi(GovernanceApi):
    """Delete a blocklist entry."""

    @extend_schema(request=None, responses={204: None, **ERRORS_404_409})
    def delete(self, request, block_id: int):
        phrase_block_delete(block_id=block_id, agent=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class BlockExpireApi(GovernanceApi):
    """Expire a blocklist entry now (it stays, expired, until ``purge_expired_blocks``)."""

    @extend_schema(request=None, responses={200: BlockSerializer, **ERRORS_404_409})
    def post(self, request, block_id: int):
        return Response(BlockSerializer(phrase_block_expire(block_id=block_id, agent=request.user)).data)


class ResolutionCorrectApi(TenantApiView):
    """The agent resolved ``text`` to ``wrong_verb`` but the user meant ``correct_verb``."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(request=CorrectionSerializer, responses={200: CorrectionResultSerializer, **ERRORS_404_409})
    def post(self, request):
        body = CorrectionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        result = phrase_correction_apply(
            text=d["text"],
            wrong_verb=d["wrong_verb"],
            correct_verb=d["correct_verb"],
            user_id=d.get("user_id"),
            request_id=d.get("request_id"),
        )
        return Response(CorrectionResultSerializer(result).data)


class ResolutionConfirmApi(TenantApiView):
    """The agent resolved ``text`` to ``verb``, ran it, and the user accepted it: the user's phrase is learned."""

    permission_classes = [ScopePermission]
    required_scopes = ["feedback"]

    @extend_schema(request=ConfirmationSerializer, responses={200: ConfirmationResultSerializer, **ERRORS_404_409})
    def post(self, request):
        body = ConfirmationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        result = phrase_confirmation_apply(text=d["text"], verb=d["verb"], user_id=d["user_id"], request_id=d.get("request_id"))
        return Response(ConfirmationResultSerializer(result).data)


def import_job_location(job_id: int) -> str:
    return reverse("learning-import-job", kwargs={"job_id": job_id})


class PhraseImportApi(GovernanceApi):
    """Import learned phrases (YAML, JSON or CSV; inline ``content`` or an uploaded ``file``): all or nothing.

    Up to LEARNING_IMPORT_SYNC_MAX_ROWS rows (and every dry run) inside the request (200 and what it did); more, or
    ``background``, as a job on a worker (202 with the job, ``Location`` its status to poll). A file that cannot be
    read, or holds too many rows, is refused (400) before any job is made."""

    # The shared JSON parser (input policy, depth limit without recursion), with the import's own size limit.
    parser_classes = [LimitedJSONParser, CheckedMultiPartParser, CheckedFormParser]

    def max_body_bytes(self) -> int:
        return settings.LEARNING_IMPORT_MAX_BYTES + 64 * 1024  # allowance for the JSON envelope

    @extend_schema(
        request={"application/json": ImportRequestSerializer, "multipart/form-data": ImportRequestSerializer},
        responses={200: ImportResultSerializer, 202: ImportAcceptedSerializer, 413: ErrorSerializer, **ERROR_RESPONSES},
    )
    def post(self, request):
        limit = settings.LEARNING_IMPORT_MAX_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit + 64 * 1024:  # refuse before reading the body (allowance for the JSON/multipart envelope)
            return error_response(
                413,
                f"The import is {length} bytes; the limit is {limit} bytes.",
                "too_large",
                {"content": [f"At most {limit} bytes."]},
            )
        body = ImportRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        field = "file" if d.get("file") else "content"
        try:
            if d.get("file"):
                check_size(d["file"].size)
                content = d["file"].read()
            else:
                content = d["content"]
            rows = parse(content, d["format"])
        except ImportFormatError as exc:
            raise ApplicationError(str(exc), field=field, code="import_unreadable") from None
        user_id = d.get("user_id") if d["scope"] == "user" else None
        source = f"import:{request.user.name}"[:40]
        if not d["dry_run"] and (d["background"] or len(rows) > settings.LEARNING_IMPORT_SYNC_MAX_ROWS):
            job = phrase_import_job_create(rows=rows, user_id=user_id, override=d["override"], source=source)
            return Response({"job": ImportJobSerializer(job).data}, status=status.HTTP_202_ACCEPTED)
        result = phrases_import(rows=rows, user_id=user_id, dry_run=d["dry_run"], override=d["override"], source=source)
        return Response(ImportResultSerializer(result).data)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        job = response.data.get("job") if response.status_code == 202 and isinstance(response.data, dict) else None
        if isinstance(job, dict) and "id" in job:  # also on a replay of the stored answer, which keeps no headers
            response["Location"] = import_job_location(job["id"])
        return response


_JOB_ID = OpenApiParameter("job_id", int, OpenApiParameter.PATH, description="The id of an import job (a 202's job.id)")


class PhraseImportJobApi(GovernanceApi):
    """An import job sent by ``POST /api/v1/learning/import``: its status, then what it did or why it failed."""

    @extend_schema(parameters=[_JOB_ID], responses={200: ImportJobSerializer, 404: ErrorSerializer, **ERROR_RESPONSES})
    def get(self, request, job_id: int):
        return Response(ImportJobSerializer(selectors.phrase_import_job_get(job_id=job_id)).data)


# Alias API: what a name stands for.


class AliasResolveApi(TenantApiView):
    """What a name stands for: the user's own aliases, then global ones; exact spelling first, then by meaning."""

    permission_classes = [ScopePermission]
    required_scopes = ["resolve"]

    @extend_schema(request=AliasResolveRequestSerializer, responses={200: AliasResolveResponseSerializer, **ERROR_RESPONSES})
    def post(self, request):
        serializer = AliasResolveRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(AliasResolveResponseSerializer(selectors.entity_alias_resolve(**serializer.validated_data)).data)
