"""MCP tool input schemas against the REST serializers: one validation path, described faithfully.

Every tool validates with its REST endpoint's serializer (plus the URL's path parameter); its JSON Schema
is generated from that serializer. Here jsonschema and the REST serializer must agree on the same
examples: what one accepts the other accepts, what one refuses the other refuses. (Rules a JSON Schema
cannot state, such as "a user-scoped block needs a user_id" or "0d is not an expiry", are only in the
serializer, which the tool runs; they are checked at the end. The other way round, DRF coerces some
values the schema types strictly, such as 5 for a string: the schema asks for the JSON type a model
should send, and such examples are left out.)
"""

import jsonschema
import pytest
from rest_framework.exceptions import ValidationError

from autonomy import api as autonomy_api
from common.fields import StrictSerializer
from feedback import api as feedback_api
from learning import api as learning_api
from mcp_server import tools as mcp_tools
from mcp_server.server import tool_definitions, validate_arguments
from mcp_server.tools import TOOLS_BY_NAME
from memories import api as memories_api

pytestmark = pytest.mark.django_db

U = "alice"
OK_IMPORT = "phrase,verb\nlist all cbus,cbu.list\n"

# tool -> (the REST view, the REST request serializer, the path parameters, accepted examples, refused examples)
CASES = {
    "resolve": (
        learning_api.ResolveApi,
        learning_api.ResolveRequestSerializer,
        [],
        [{"text": "list all cbus"}, {"text": "x", "user_id": U, "limit": 3}, {"text": "x", "user_id": None}],
        [{}, {"text": ""}, {"text": "x", "limit": 0}, {"text": "x", "limit": 21}, {"text": "x", "user_id": "-bad"}],
    ),
    "select_option": (
        learning_api.DisambiguationSelectApi,
        learning_api.DisambiguationSelectSerializer,
        ["request_id"],
        [{"request_id": "r", "selected_verb": "cbu.list"}, {"request_id": "r", "selected_verb": "cbu.list", "args": {"n": 1}}],
        [{"request_id": "r"}, {"request_id": "r", "selected_verb": "cbu.list", "args": [1]}, {"selected_verb": "cbu.list"}],
    ),
    "abandon_options": (
        learning_api.DisambiguationAbandonApi,
        learning_api.DisambiguationAbandonSerializer,
        ["request_id"],
        [{"request_id": "r", "reason": "timeout"}, {"request_id": "r", "reason": "closed_session", "user_id": U}],
        [{"request_id": "r", "reason": "bored"}, {"request_id": "r"}],
    ),
    "confirm_resolution": (
        learning_api.ResolutionConfirmApi,
        learning_api.ConfirmationSerializer,
        [],
        [{"text": "list all cbus", "verb": "cbu.list", "user_id": U}],
        [{"text": "list all cbus", "verb": "cbu.list"}, {"text": "t" * 501, "verb": "cbu.list", "user_id": U}],
    ),
    "correct_resolution": (
        learning_api.ResolutionCorrectApi,
        learning_api.CorrectionSerializer,
        [],
        [
            {"text": "t", "wrong_verb": "cbu.list", "correct_verb": "cbu.show"},
            {"text": "t", "wrong_verb": "a.b", "correct_verb": "c.d", "user_id": U},
        ],
        [{"text": "t", "wrong_verb": "cbu.list"}, {"text": "t", "wrong_verb": "a.b", "correct_verb": "v" * 121}],
    ),
    "block_phrase": (
        learning_api.BlockCreateApi,
        learning_api.BlockCreateSerializer,
        [],
        [
            {"phrase": "delete all", "verb": "cbu.delete"},
            {"phrase": "p", "verb": "cbu.delete", "scope": "user", "user_id": U, "expires_in": "30d"},
        ],
        [
            {"phrase": "p", "verb": "cbu.delete", "expires_in": "30x"},
            {"phrase": "p", "verb": "cbu.delete", "expires_in": "\u0663\u0660d"},
            {"phrase": "p", "verb": "cbu.delete", "scope": "team"},
            {"verb": "cbu.delete"},
        ],
    ),
    "import_phrases": (
        learning_api.PhraseImportApi,
        learning_api.ImportRequestSerializer,
        [],
        [
            {"format": "csv", "content": OK_IMPORT},
            {"format": "csv", "content": OK_IMPORT, "scope": "user", "user_id": U, "dry_run": False},
        ],
        [{"format": "xls", "content": OK_IMPORT}, {"format": "csv", "content": OK_IMPORT, "dry_run": "maybe"}],
    ),
    "get_import_job": (
        learning_api.PhraseImportJobApi,
        StrictSerializer,  # a GET: no body, the path parameter only
        ["job_id"],
        [{"job_id": 1}],
        [{}, {"job_id": 0}, {"job_id": "one"}],
    ),
    "list_learning_candidates": (
        learning_api.CandidateListApi,
        learning_api.CandidateListQuerySerializer,
        [],
        [{}, {"status": "pending", "limit": 10, "offset": 5}, {"type": "entity_alias", "min_occurrences": 2}],
        [{"status": "maybe"}, {"limit": 201}, {"offset": -1}, {"min_occurrences": 0}],
    ),
    "approve_learning_candidate": (
        learning_api.CandidateApproveApi,
        learning_api.CandidateApproveSerializer,
        ["candidate_id"],
        [{"candidate_id": 1}, {"candidate_id": 2, "apply_immediately": False}],
        [{"candidate_id": 0}, {}, {"candidate_id": 1, "apply_immediately": "perhaps"}],
    ),
    "reject_learning_candidate": (
        learning_api.CandidateRejectApi,
        learning_api.CandidateRejectSerializer,
        ["candidate_id"],
        [{"candidate_id": 1, "reason": "noise", "add_to_blocklist": True}],
        [{"candidate_id": 1, "reason": "r" * 2001}, {"reason": "noise"}],
    ),
    "learning_stats": (
        learning_api.LearningStatsApi,
        learning_api.StatsQuerySerializer,
        [],
        [{}, {"time_range": "month"}],
        [{"time_range": "year"}],
    ),
    "resolve_alias": (
        learning_api.AliasResolveApi,
        learning_api.AliasResolveRequestSerializer,
        [],
        [{"text": "big blue"}, {"text": "big blue", "user_id": U, "entity_type": "company", "limit": 2}],
        [{}, {"text": "big blue", "limit": 0}, {"text": "n" * 301}],
    ),
    "observe_memory": (
        memories_api.MemoryObserveApi,
        memories_api.ObserveRequestSerializer,
        [],
        [{"user_id": U, "user_message": "How do I rotate logs?", "assistant_message": "Use logrotate nightly."}],
        [
            {"user_id": U, "user_message": "hi"},
            {"user_id": U, "user_message": "q", "assistant_message": "a", "meta": {"colour": "red"}},
        ],
    ),
    "retrieve_memories": (
        memories_api.MemoryRetrieveApi,
        memories_api.RetrieveRequestSerializer,
        [],
        [
            {"user_id": U, "query": "log rotation"},
            {"user_id": U, "query": "logs", "filters": {"type": "pattern", "tags": ["ops"]}},
        ],
        [
            {"query": "logs"},
            {"user_id": U, "query": "logs", "filters": {"type": "poem"}},
            {"user_id": U, "query": "logs", "filters": {"x": 1}},
        ],
    ),
    "propose_action": (
        feedback_api.ProposalListCreateApi,
        feedback_api.serializers.ProposalCreateSerializer,
        [],
        [{"action": "email.send", "proposed_action": {"to": "a@b.c"}, "reasoning": {"confidence": 0.8, "why": "asked"}}],
        [
            {"action": "Email", "proposed_action": {}, "reasoning": {"confidence": 0.8}},
            {"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": 1.5}},
            {"action": "email.send", "proposed_action": {}, "reasoning": {}},
        ],
    ),
    "get_proposal": (
        feedback_api.ProposalDetailApi,
        mcp_tools.ProposalRefSerializer,  # REST has only the URL's <int:pk>: the tool's one field is it
        [],
        [{"proposal": 3}],
        [{"proposal": 0}, {}, {"proposal": "7"}],
    ),
    "consult_action": (
        autonomy_api.ActionConsultApi,
        autonomy_api.ConsultQuerySerializer,
        ["action"],
        [{"action": "email.send", "confidence": 0.9}],
        [{"action": "email.send", "confidence": 2}, {"action": "Email Send", "confidence": 0.5}, {"action": "email.send"}],
    ),
    "record_outcome": (
        feedback_api.OutcomeApi,
        feedback_api.serializers.OutcomeSerializer,
        [],
        [{"proposal": 1, "success": True}, {"proposal": 1, "success": False, "error": "", "result": None}],
        [{"proposal": 0, "success": True}, {"proposal": 1}, {"proposal": 1, "success": True, "error": "e" * 5001}],
    ),
}


def schemas():
    return {t.name: t.input_schema for t in tool_definitions()}


def test_every_tool_has_a_case_and_names_its_rest_view_and_serializer():
    assert set(CASES) == set(TOOLS_BY_NAME)
    for name, (view, serializer, path, _, _) in CASES.items():
        tool = TOOLS_BY_NAME[name]
        assert tool.view is view, name
        assert issubclass(tool.serializer, serializer), name  # the REST serializer itself, or it plus a path parameter
        declared = set(tool.serializer().fields) - set(serializer().fields)
        assert declared == set(path), name


def test_schemas_are_valid_json_schema_and_strict_at_the_top():
    for name, schema in schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name


@pytest.mark.parametrize("name", sorted(CASES))
def test_schema_and_rest_serializer_agree_on_examples(name):
    view, rest_serializer, path, accepted, refused = CASES[name]
    validator = jsonschema.Draft202012Validator(schemas()[name])
    for example in accepted:
        body = {k: v for k, v in example.items() if k not in path}
        rest = rest_serializer(data=body)
        assert rest.is_valid(), (name, example, rest.errors)
        assert not list(validator.iter_errors(example)), (name, example)
        validate_arguments(TOOLS_BY_NAME[name], example)  # the tool's own check passes too
    for example in refused:
        assert list(validator.iter_errors(example)), (name, example, "the schema accepts what REST refuses")
        tool_check = TOOLS_BY_NAME[name].serializer(data=example)
        assert not tool_check.is_valid(), (name, example)
        body = {k: v for k, v in example.items() if k not in path}
        if not any(k in tool_check.errors for k in path):  # a bad body, not a bad URL: REST refuses it too
            assert not rest_serializer(data=body).is_valid(), (name, example, "REST accepts what the schema refuses")


def test_unknown_argument_names_are_refused_by_the_schema_and_the_tool():
    for name, (_, _, _, accepted, _) in CASES.items():
        example = {**accepted[0], "colour": "red"}
        assert list(jsonschema.Draft202012Validator(schemas()[name]).iter_errors(example)), name
        with pytest.raises(ValidationError) as err:
            validate_arguments(TOOLS_BY_NAME[name], example)
        assert "colour" in err.value.detail, name


def test_rules_only_the_serializer_states_are_still_enforced_by_the_tool():
    for name, example, field in [
        ("block_phrase", {"phrase": "p", "verb": "cbu.delete", "scope": "user"}, "user_id"),
        ("block_phrase", {"phrase": "p", "verb": "cbu.delete", "expires_in": "0d"}, "expires_in"),
        ("import_phrases", {"format": "csv", "content": OK_IMPORT, "user_id": U}, "user_id"),
        ("resolve", {"text": "x", "domain": "no-such-domain"}, "domain"),
    ]:
        with pytest.raises(ValidationError) as err:
            validate_arguments(TOOLS_BY_NAME[name], example)
        assert field in err.value.detail, (name, err.value.detail)


def test_import_is_a_dry_run_unless_asked():
    assert validate_arguments(TOOLS_BY_NAME["import_phrases"], {"format": "csv", "content": OK_IMPORT})["dry_run"] is True
    assert schemas()["import_phrases"]["properties"]["dry_run"]["default"] is True
    assert "file" not in schemas()["import_phrases"]["properties"]
