"""The MCP tools: each one is a REST endpoint's serializer, scope and service, called the same way.

A tool names the REST view it mirrors (``view``): the key must carry that view's ``required_scopes``
(``agents.authentication.ScopePermission``, the REST check itself), the arguments are validated by the
view's own request serializer (``serializer``), and ``run`` calls the service or selector the view calls
with the caller's agent and key, shaped as the view answers. Path parameters of the REST URL (the
request id of an ambiguous answer, a candidate id, an action name) become arguments: the serializer is
the view's, extended with that one field.

Deliberate differences from REST, for models: ``import_phrases`` is a dry run unless ``dry_run`` is
false and takes the file's text inline; ``list_learning_candidates`` answers ``{count, limit, offset,
results}`` instead of page links; unknown argument names are refused (REST ignores unknown keys).
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone
from rest_framework import serializers
from rest_framework.views import APIView

from actions.models import ACTION_NAME_RE
from agents.models import Agent, ApiKey
from autonomy import api as autonomy_api
from autonomy import selectors as autonomy_selectors
from autonomy.serializers import ConsultQuerySerializer, ConsultSerializer
from common.api import ApplicationError
from common.fields import IdField, StrictSerializer
from feedback import api as feedback_api
from feedback import selectors as feedback_selectors
from feedback.serializers import OutcomeSerializer, ProposalCreateSerializer, ProposalSerializer
from feedback.services.reviews import Reviewer, proposal_create, proposal_outcome_record
from learning import api as learning_api
from learning import selectors as learning_selectors
from learning.importing import ImportFormatError, check_size, parse
from learning.resolution import resolve
from learning.serializers import (
    AliasResolveRequestSerializer,
    AliasResolveResponseSerializer,
    BlockCreateSerializer,
    BlockSerializer,
    CandidateApproveSerializer,
    CandidateListQuerySerializer,
    CandidateRejectSerializer,
    ConfirmationResultSerializer,
    ConfirmationSerializer,
    CorrectionResultSerializer,
    CorrectionSerializer,
    DisambiguationAbandonSerializer,
    DisambiguationSelectSerializer,
    ImportJobSerializer,
    ImportRequestSerializer,
    ImportResultSerializer,
    LearningCandidateSerializer,
    ResolveRequestSerializer,
    StatsQuerySerializer,
    StatsSerializer,
)
from learning.services.blocks import phrase_block_add
from learning.services.candidates import candidate_approve, candidate_reject
from learning.services.corrections import phrase_confirmation_apply, phrase_correction_apply
from learning.services.disambiguations import disambiguation_abandon, disambiguation_select, resolution_store
from learning.services.imports import phrase_import_job_create, phrases_import
from memories import api as memories_api
from memories.serializers import MemoryItemSerializer, ObserveRequestSerializer, RetrieveRequestSerializer
from memories.services import memory_observe, memory_retrieve
from review.models import Kind
from review.services import admin_decisions_record, api_decision_begin


@dataclass(frozen=True)
class Caller:
    """Who calls: the key's agent and the key (``request.user`` and ``request.auth`` in REST)."""

    agent: Agent
    key: ApiKey

    @property
    def label(self) -> str:
        return f"mcp:{self.agent.name}"[:40]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    serializer: type[serializers.Serializer]
    view: type[APIView]  # the REST endpoint this tool is: its required_scopes apply
    run: Callable[[Caller, dict], dict]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


def with_path_param(base: type[serializers.Serializer], name: str, **fields) -> type[serializers.Serializer]:
    """The REST serializer plus the URL's path parameter(s) as fields."""
    return type(name, (base,), {"__module__": __name__, **fields})


# --- Request serializers: the REST ones, with path parameters ------------------------------------

# as REST's path takes it: not trimmed, any length (an id no request has is a 404, not a 400)
REQUEST_ID = serializers.CharField(trim_whitespace=False, help_text="The request_id of the ambiguous resolve answer")

SelectOptionSerializer = with_path_param(DisambiguationSelectSerializer, "SelectOptionSerializer", request_id=REQUEST_ID)
AbandonOptionsSerializer = with_path_param(DisambiguationAbandonSerializer, "AbandonOptionsSerializer", request_id=REQUEST_ID)
ApproveCandidateSerializer = with_path_param(CandidateApproveSerializer, "ApproveCandidateSerializer", candidate_id=IdField())
RejectCandidateSerializer = with_path_param(CandidateRejectSerializer, "RejectCandidateSerializer", candidate_id=IdField())
ConsultActionSerializer = with_path_param(
    ConsultQuerySerializer,
    "ConsultActionSerializer",
    action=serializers.RegexField(
        ACTION_NAME_RE,
        max_length=100,
        help_text="Action name, a lowercase dotted identifier such as email.send",
        error_messages={"invalid": "Action names are lowercase dotted identifiers such as 'email.send'."},
    ),
)


class ImportJobRefSerializer(StrictSerializer):
    job_id = IdField(help_text="The id of an import job (the job.id import_phrases answered)")


class ProposalRefSerializer(StrictSerializer):
    proposal = IdField(help_text="Id of one of your proposals")


class ImportPhrasesSerializer(ImportRequestSerializer):
    """The REST import body without the multipart upload, a dry run unless asked otherwise."""

    file = None
    content = serializers.CharField(trim_whitespace=False, help_text="The file's text (YAML, JSON or CSV as in `format`)")
    dry_run = serializers.BooleanField(default=True, help_text="true (default): report what would change, change nothing")


# --- What each tool runs (the REST view's body, with the caller's agent and key) --------------------


def _resolve(caller: Caller, d: dict) -> dict:
    result = resolve(**d)
    resolution_store(resolution=result, agent=caller.agent, domain=d.get("domain"))
    body = result.as_dict()
    if result.outcome != "ambiguous":
        body.pop("options")
    for key in ("text", "user_id", "model"):
        body.pop(key)
    return body


def _select_option(caller: Caller, d: dict) -> dict:
    row = disambiguation_select(
        request_id=d["request_id"],
        selected_verb=d["selected_verb"],
        args=d.get("args"),
        agent_id=caller.agent.pk,
        user_id=d.get("user_id"),
    )
    return learning_api.selection_answer(row)


def _abandon_options(caller: Caller, d: dict) -> dict:
    row = disambiguation_abandon(
        request_id=d["request_id"], reason=d["reason"], agent_id=caller.agent.pk, user_id=d.get("user_id")
    )
    return learning_api.abandon_answer(row)


def _confirm(caller: Caller, d: dict) -> dict:
    return ConfirmationResultSerializer(
        phrase_confirmation_apply(text=d["text"], verb=d["verb"], user_id=d["user_id"], request_id=d.get("request_id"))
    ).data


def _correct(caller: Caller, d: dict) -> dict:
    result = phrase_correction_apply(
        text=d["text"],
        wrong_verb=d["wrong_verb"],
        correct_verb=d["correct_verb"],
        user_id=d.get("user_id"),
        request_id=d.get("request_id"),
    )
    return CorrectionResultSerializer(result).data


def _block_phrase(caller: Caller, d: dict) -> dict:
    expires_in = d.get("expires_in")
    block, created = phrase_block_add(
        phrase=d["phrase"],
        verb_name=d["verb"],
        reason=d["reason"],
        user_id=d.get("user_id") if d["scope"] == "user" else None,
        expires_at=timezone.now() + expires_in if expires_in else None,
        source=caller.label,
    )
    return {**BlockSerializer(block).data, "created": created}  # REST says so by its status (201 or 200)


def _import_phrases(caller: Caller, d: dict) -> dict:
    try:
        check_size(len(d["content"].encode("utf-8")))
        rows = parse(d["content"], d["format"])
    except ImportFormatError as exc:
        raise ApplicationError(str(exc), field="content", code="import_unreadable") from None
    user_id = d.get("user_id") if d["scope"] == "user" else None
    source = f"import:{caller.label}"[:40]
    if not d["dry_run"] and (d.get("background") or len(rows) > settings.LEARNING_IMPORT_SYNC_MAX_ROWS):
        # as REST answers 202: a job on a worker, its status read with get_import_job
        job = phrase_import_job_create(rows=rows, user_id=user_id, override=d.get("override", False), source=source)
        return {"job": ImportJobSerializer(job).data}
    result = phrases_import(rows=rows, user_id=user_id, dry_run=d["dry_run"], override=d.get("override", False), source=source)
    return ImportResultSerializer(result).data


def _get_import_job(caller: Caller, d: dict) -> dict:
    return ImportJobSerializer(learning_selectors.phrase_import_job_get(job_id=d["job_id"])).data


def _list_candidates(caller: Caller, q: dict) -> dict:
    qs = learning_selectors.candidate_list(
        status=q.get("status"),
        candidate_type=q.get("type"),
        min_occurrences=q.get("min_occurrences"),
        risk_level=q.get("risk_level"),
        user_id=q.get("user_id"),
    ).select_related("reviewed_by", "reviewed_by_agent")
    limit, offset = q.get("limit") or learning_api.CandidatePagination.default_limit, q.get("offset") or 0
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": LearningCandidateSerializer(qs[offset : offset + limit], many=True).data,
    }


def _approve_candidate(caller: Caller, d: dict) -> dict:
    waiting = api_decision_begin(kind=Kind.CANDIDATE, object_id=d["candidate_id"], user=None)  # the inbox's lock and claims
    candidate = learning_selectors.candidate_get(candidate_id=d["candidate_id"])
    done = candidate_approve(candidate=candidate, apply_immediately=d["apply_immediately"], agent=caller.agent)
    admin_decisions_record(kind=Kind.CANDIDATE, waiting=waiting, user=None, agent=caller.agent, source="mcp")
    return LearningCandidateSerializer(done).data


def _reject_candidate(caller: Caller, d: dict) -> dict:
    waiting = api_decision_begin(kind=Kind.CANDIDATE, object_id=d["candidate_id"], user=None)  # the inbox's lock and claims
    candidate = learning_selectors.candidate_get(candidate_id=d.pop("candidate_id"))
    done = candidate_reject(candidate=candidate, agent=caller.agent, **d)
    admin_decisions_record(
        kind=Kind.CANDIDATE, waiting=waiting, user=None, agent=caller.agent, reason=d.get("reason") or "", source="mcp"
    )
    return LearningCandidateSerializer(done).data


def _stats(caller: Caller, q: dict) -> dict:
    return StatsSerializer(learning_selectors.learning_stats(**q)).data


def _observe(caller: Caller, d: dict) -> dict:
    result = memory_observe(
        user_id=d["user_id"], user_message=d["user_message"], assistant_message=d["assistant_message"], meta=d.get("meta") or {}
    )
    return {
        "decision": result.decision,
        "memory_id": result.memory_id,
        "evidence": result.evidence,
        "embedding_pending": result.embedding_pending,  # REST's X-Embedding-Pending header
    }


def _retrieve(caller: Caller, d: dict) -> dict:
    result = memory_retrieve(
        user_id=d["user_id"],
        query=d["query"],
        filters=d.get("filters") or {},
        count_hits=caller.key.has_scope("feedback"),  # a read-only key reads and writes nothing
    )
    return {
        "items": MemoryItemSerializer(result.items, many=True).data,
        "block": result.block,
        "degraded": result.degraded,
        "degraded_reason": result.degraded_reason,
        "retrieval_id": result.retrieval_id,
    }


def _propose(caller: Caller, d: dict) -> dict:
    return ProposalSerializer(proposal_create(agent=caller.agent, **d)).data


def _get_proposal(caller: Caller, d: dict) -> dict:
    return ProposalSerializer(feedback_selectors.proposal_get(agent=caller.agent, pk=d["proposal"])).data


def _consult(caller: Caller, d: dict) -> dict:
    answer = autonomy_selectors.action_consult(agent=caller.agent, action_name=d["action"], confidence=d["confidence"])
    return ConsultSerializer(answer).data


def _record_outcome(caller: Caller, d: dict) -> dict:
    proposal = proposal_outcome_record(
        agent=caller.agent,
        proposal_id=d["proposal"],
        success=d["success"],
        result=d["result"],
        error=d["error"],
        explanation=d["explanation"],
        mistake_category=d["mistake_category"],
        reviewer=Reviewer(key=caller.key),
    )
    return ProposalSerializer(proposal).data


def _resolve_alias(caller: Caller, d: dict) -> dict:
    return AliasResolveResponseSerializer(learning_selectors.entity_alias_resolve(**d)).data


# --- The catalogue of tools ----------------------------------------------------------------------

_USER = "Pass the end user's user_id so their own learned phrases count and they learn from the answer."

TOOLS: list[Tool] = [
    Tool(
        "resolve",
        "Resolve what the user typed to a verb",
        "Map what the end user typed to the verb (action) to run. Answers outcome 'resolved' with `verb`, "
        "'ambiguous' with `options` and a `request_id` (ask the user which option they meant, then call "
        "select_option, or abandon_options if they don't choose), or 'no_match'. " + _USER + " Scope: resolve.",
        ResolveRequestSerializer,
        learning_api.ResolveApi,
        _resolve,
    ),
    Tool(
        "select_option",
        "Answer an ambiguous resolve with the user's choice",
        "The user picked one of the options of an ambiguous resolve answer: pass its `request_id` and the chosen "
        "verb as `selected_verb` (it must be one of the options offered). The system learns the phrase for this "
        "user, so the same text resolves next time. Answers the verb to run with your `args` echoed. An id "
        "answered already gives a conflict error. Scope: feedback.",
        SelectOptionSerializer,
        learning_api.DisambiguationSelectApi,
        _select_option,
    ),
    Tool(
        "abandon_options",
        "Record that the user left an ambiguous answer unanswered",
        "The user did not choose among the options of an ambiguous resolve answer: `reason` is typed_new_input "
        "(they typed something else), closed_session or timeout. Scope: feedback.",
        AbandonOptionsSerializer,
        learning_api.DisambiguationAbandonApi,
        _abandon_options,
    ),
    Tool(
        "confirm_resolution",
        "Confirm a resolution the user accepted",
        "You resolved `text` to `verb`, ran it, and the user accepted the result: the text becomes that user's "
        "own phrase for the verb. Never overrides a correction, a choice, a block or a phrase a reviewer switched "
        "off (conflict error). Scope: feedback.",
        ConfirmationSerializer,
        learning_api.ResolutionConfirmApi,
        _confirm,
    ),
    Tool(
        "correct_resolution",
        "Correct a wrong resolution",
        "You resolved `text` to `wrong_verb` but the user meant `correct_verb`: the wrong mapping decays and the "
        "right one gains, for that user (without user_id, a global correction is proposed for review). Scope: feedback.",
        CorrectionSerializer,
        learning_api.ResolutionCorrectApi,
        _correct,
    ),
    Tool(
        "block_phrase",
        "Block a verb for a phrase (governance)",
        "Never resolve `phrase` (and its close paraphrases) to `verb`, globally (scope 'global') or for one user "
        "(scope 'user' with user_id). `expires_in` such as 30d, 1w, 24h or 90m makes the block temporary; omit it "
        "for a permanent block. Scope: governance.",
        BlockCreateSerializer,
        learning_api.BlockCreateApi,
        _block_phrase,
        destructive=True,
    ),
    Tool(
        "import_phrases",
        "Import learned phrases in bulk (governance; dry run by default)",
        "Import phrase → verb rows from `content` in `format` yaml, json or csv, globally or for one user. All or "
        "nothing. By default a DRY RUN: it reports what would be added, updated, kept or rejected and changes nothing; "
        "call again with dry_run false to apply. An import of many rows (or with background true) runs as a job on a "
        "worker: the answer is {job}, whose status get_import_job reads. Scope: governance.",
        ImportPhrasesSerializer,
        learning_api.PhraseImportApi,
        _import_phrases,
    ),
    Tool(
        "get_import_job",
        "Read an import job (governance)",
        "The status of an import job that import_phrases started: queued, running, then succeeded with what it did, "
        "or failed with the rejected rows (nothing written). Scope: governance.",
        ImportJobRefSerializer,
        learning_api.PhraseImportJobApi,
        _get_import_job,
        read_only=True,
    ),
    Tool(
        "list_learning_candidates",
        "List learning candidates (governance)",
        "What the system proposes to learn (phrases from users' choices and corrections, aliases, imports), "
        "pending first, then by occurrences and recency. Filter by status, type, risk_level, min_occurrences, "
        "user_id; page with limit (default 50, at most 200) and offset. Scope: governance.",
        CandidateListQuerySerializer,
        learning_api.CandidateListApi,
        _list_candidates,
        read_only=True,
    ),
    Tool(
        "approve_learning_candidate",
        "Approve a learning candidate (governance)",
        "Approve the candidate `candidate_id`; with apply_immediately (default true) the learned phrase or alias "
        "is written at once. A candidate decided already gives a conflict error. Scope: governance.",
        ApproveCandidateSerializer,
        learning_api.CandidateApproveApi,
        _approve_candidate,
    ),
    Tool(
        "reject_learning_candidate",
        "Reject a learning candidate (governance)",
        "Reject the candidate `candidate_id` with a `reason`; add_to_blocklist also blocks its phrase for the "
        "suggested verb. Scope: governance.",
        RejectCandidateSerializer,
        learning_api.CandidateRejectApi,
        _reject_candidate,
        destructive=True,
    ),
    Tool(
        "learning_stats",
        "Learning statistics (governance)",
        "Candidates by status created within `time_range` (day, week, month, all), active learned phrases, "
        "aliases and blocks, and the top pending candidates. Scope: governance.",
        StatsQuerySerializer,
        learning_api.LearningStatsApi,
        _stats,
        read_only=True,
    ),
    Tool(
        "resolve_alias",
        "Resolve a name to the entity it stands for",
        "What a name the user wrote stands for (an alias such as 'big blue' → 'IBM'): the user's own aliases "
        "first, then global ones; exact spelling first, then by meaning. Answers `canonical_name` (null when "
        "nothing matches) and the matches with scores. Scope: resolve.",
        AliasResolveRequestSerializer,
        learning_api.AliasResolveApi,
        _resolve_alias,
        read_only=True,
    ),
    Tool(
        "observe_memory",
        "Learn a lesson from one conversation turn",
        "Give one turn (the user's message and your answer): a reusable lesson is extracted, checked against "
        "secrets, deduplicated against the user's memories and stored. Answers the decision (saved, merged, "
        "new_version, skipped, blocked) with its evidence, and embedding_pending (true: stored without its vector "
        "for now; it is embedded later). Scope: feedback.",
        ObserveRequestSerializer,
        memories_api.MemoryObserveApi,
        _observe,
    ),
    Tool(
        "retrieve_memories",
        "Retrieve the user's memories for a query",
        "The user's best memories for `query`, and `block`: a ready-to-use context block to put into your prompt "
        "(the text answer is the block itself). Scope: resolve.",
        RetrieveRequestSerializer,
        memories_api.MemoryRetrieveApi,
        _retrieve,
    ),
    Tool(
        "propose_action",
        "Propose an action for human approval",
        "Propose running `action` (a dotted name such as email.send) with `proposed_action` (its arguments as a "
        "JSON object) and `reasoning` (a JSON object holding at least your `confidence` in [0, 1]). A reviewer "
        "approves, modifies or rejects it; check it with get_proposal, then report how it ended with "
        "record_outcome. Call consult_action first. Scope: feedback.",
        ProposalCreateSerializer,
        feedback_api.ProposalListCreateApi,
        _propose,
    ),
    Tool(
        "get_proposal",
        "Read one of your proposals",
        "One of your own proposals by id, with its status (pending, approved, rejected, modified, completed, "
        "failed) and any modified action. Other agents' proposals are not found. Scope: feedback.",
        ProposalRefSerializer,
        feedback_api.ProposalDetailApi,
        _get_proposal,
        read_only=True,
    ),
    Tool(
        "consult_action",
        "Consult before acting",
        "Before acting, pass the `action` name and your stated `confidence`: answers the action's autonomy level, "
        "your confidence adjusted for your past mistakes and calibration, whether approval is required (then "
        "use propose_action instead of acting), warnings, and the correction rules in force. Scope: resolve.",
        ConsultActionSerializer,
        autonomy_api.ActionConsultApi,
        _consult,
        read_only=True,
    ),
    Tool(
        "record_outcome",
        "Report how an approved proposal ended",
        "After running your approved (or modified) proposal, report `success`, with `result` or `error`, an "
        "optional `explanation` and `mistake_category`. Only your own proposals. Scope: feedback.",
        OutcomeSerializer,
        feedback_api.OutcomeApi,
        _record_outcome,
    ),
]

TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
