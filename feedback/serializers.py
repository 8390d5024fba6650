"""Serializers of the feedback API."""

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from actions.models import ACTION_NAME_RE as _OUT_ACTION_RE
from common.fields import (
    INT32_MAX,
    BoundedIntegerField,
    ConfidenceField,
    IdField,
    OffsetField,
    StrictBooleanField,
    StrictChoiceField,
    StrictQuerySerializer,
    StrictSerializer,
    json_type_error,
)
from feedback.models import FeedbackType, ReviewOutcome

_ACTION_HELP = "A lowercase dotted identifier such as email.send"
_NO_NUL = RegexValidator(r"^[^\x00]*$", "Must not contain NUL characters.")


def _text(**kwargs):
    return serializers.CharField(validators=[_NO_NUL], **kwargs)


def _action_field(**kwargs):
    return serializers.RegexField(
        _OUT_ACTION_RE,
        max_length=100,
        help_text=_ACTION_HELP,
        error_messages={"invalid": "Action names are lowercase dotted identifiers such as 'email.send'."},
        **kwargs,
    )


@extend_schema_field(
    {
        "type": "object",
        "properties": {"confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["confidence"],
        "additionalProperties": True,
        "description": "The agent's reasoning: any JSON object holding its confidence in [0, 1]; extra keys are kept.",
    }
)
class ReasoningField(serializers.DictField):
    """The agent's reasoning: a free-form JSON object (its keys are the agent's, not the API's) holding its confidence."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if "confidence" not in value:
            raise serializers.ValidationError({"confidence": ["This field is required."]})
        field = ConfidenceField()
        reason = json_type_error(field, value["confidence"])
        if reason:
            raise serializers.ValidationError({"confidence": [reason]})
        try:
            value["confidence"] = field.run_validation(value["confidence"])
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({"confidence": exc.detail}) from None
        return value


class ProposalCreateSerializer(StrictSerializer):
    action = _action_field()
    proposed_action = serializers.DictField(help_text="The action the agent wants to run, as a JSON object")
    reasoning = ReasoningField()


class ProposalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField(source="action.name")
    status = serializers.CharField(help_text="pending, approved, rejected, modified, completed or failed")
    proposed_action = serializers.JSONField()
    reasoning = serializers.JSONField()
    confidence = serializers.FloatField()
    modified_action = serializers.JSONField(allow_null=True)
    review_notes = serializers.CharField()
    reviewed_at = serializers.DateTimeField(allow_null=True)
    outcome_result = serializers.JSONField(allow_null=True)
    outcome_error = serializers.CharField()
    completed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class ApproveSerializer(StrictSerializer):
    review_notes = _text(required=False, allow_blank=True, default="", max_length=5000)


class ReviewSerializer(ApproveSerializer):
    mistake_category = _text(required=False, allow_blank=True, default="", max_length=60)


class ModifySerializer(ReviewSerializer):
    modified_action = serializers.DictField(help_text="The corrected action, as a JSON object")


class ExecutionCreateSerializer(StrictSerializer):
    action = _action_field()
    params = serializers.DictField(required=False, default=dict)
    reasoning = serializers.DictField(required=False, default=dict)
    confidence = ConfidenceField(help_text="Your stated confidence in [0, 1]")
    success = StrictBooleanField()
    result = serializers.JSONField(required=False, allow_null=True, default=None)
    error = _text(required=False, allow_blank=True, default="", max_length=5000)
    duration_ms = BoundedIntegerField(required=False, allow_null=True, default=None, min_value=0, max_value=INT32_MAX)


class ExecutionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField(source="action.name")
    params = serializers.JSONField()
    reasoning = serializers.JSONField()
    confidence = serializers.FloatField()
    success = serializers.BooleanField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.CharField()
    duration_ms = serializers.IntegerField(allow_null=True)
    review_outcome = serializers.CharField(allow_null=True)
    review_notes = serializers.CharField()
    reviewed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class ExecutionReviewSerializer(ReviewSerializer):
    outcome = StrictChoiceField(choices=ReviewOutcome.choices)
    corrected_action = serializers.DictField(required=False, allow_null=True, default=None)


class OutcomeSerializer(StrictSerializer):
    proposal = IdField(help_text="Id of your approved or modified proposal")
    success = StrictBooleanField()
    result = serializers.JSONField(required=False, allow_null=True, default=None)
    error = _text(required=False, allow_blank=True, default="", max_length=5000)
    explanation = _text(required=False, allow_blank=True, default="", max_length=5000)
    mistake_category = _text(required=False, allow_blank=True, default="", max_length=60)


class OverrideSerializer(StrictSerializer):
    action = _action_field()
    original_action = serializers.DictField()
    corrected_action = serializers.DictField()
    explanation = _text(required=False, allow_blank=True, default="", max_length=5000)
    confidence = ConfidenceField(required=False, allow_null=True, default=None)
    context = serializers.DictField(required=False, default=dict)
    proposal = IdField(required=False, allow_null=True, default=None)
    execution = IdField(required=False, allow_null=True, default=None)
    mistake_category = _text(required=False, allow_blank=True, default="", max_length=60)


class FeedbackRecordSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField(source="action.name")
    feedback_type = serializers.CharField(help_text=", ".join(FeedbackType.values))
    proposal = serializers.IntegerField(source="proposal_id", allow_null=True)
    execution = serializers.IntegerField(source="execution_id", allow_null=True)
    original_action = serializers.JSONField(allow_null=True)
    corrected_action = serializers.JSONField(allow_null=True)
    correction_delta = serializers.JSONField(allow_null=True)
    human_explanation = serializers.CharField()
    agent_confidence = serializers.FloatField(allow_null=True)
    action_context = serializers.JSONField()
    mistake_category = serializers.CharField()
    pattern = serializers.IntegerField(source="pattern_id", allow_null=True)
    correction_rule = serializers.IntegerField(source="correction_rule_id", allow_null=True)
    processed = serializers.BooleanField()
    processed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class MistakePatternSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField(source="action.name")
    category = serializers.CharField()
    feedback_types = serializers.ListField(child=serializers.CharField(), help_text="The types of the records it grouped")
    description = serializers.CharField()
    occurrence_count = serializers.IntegerField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    status = serializers.CharField(help_text="active, mitigated, resolved or dismissed")
    common_correction = serializers.JSONField(allow_null=True)


class ProposalListQuerySerializer(StrictQuerySerializer):
    """The filters of proposals and executions."""

    action = _text(required=False, allow_blank=True, max_length=100, help_text="Action name")
    status = _text(
        required=False,
        allow_blank=True,
        max_length=20,
        help_text="Proposal status, review outcome (executions) or pattern status (records, patterns)",
    )
    limit = BoundedIntegerField(required=False, default=50, min_value=1, max_value=500)
    offset = OffsetField(default=0)


class ListQuerySerializer(ProposalListQuerySerializer):
    """The filters of feedback records and mistake patterns: also their type."""

    feedback_type = _text(
        required=False, allow_blank=True, max_length=60, help_text="Feedback type (records) or pattern category (patterns)"
    )
