"""Serializers of the autonomy API (validation and answer shapes only)."""

from django.core.validators import RegexValidator
from rest_framework import serializers

from autonomy.models import TransitionStatus
from common.fields import (
    BoundedIntegerField,
    ConfidenceField,
    OffsetField,
    StrictChoiceField,
    StrictQuerySerializer,
    StrictSerializer,
)


class ActionSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    autonomy_level = serializers.IntegerField(help_text="1 propose only, 2 act then be reviewed, 3 act alone")
    auto_registered = serializers.BooleanField()


class ConsultQuerySerializer(StrictQuerySerializer):
    confidence = ConfidenceField(help_text="Your stated confidence in [0, 1]")


class TransitionListQuerySerializer(StrictQuerySerializer):
    status = StrictChoiceField(choices=TransitionStatus.choices, required=False, help_text="Only transitions in this status")
    limit = BoundedIntegerField(required=False, default=200, min_value=1, max_value=1000, help_text="At most this many")
    offset = OffsetField(default=0, help_text="Skip this many of the newest first (older pages)")


class ActionListQuerySerializer(StrictQuerySerializer):
    limit = BoundedIntegerField(required=False, default=1000, min_value=1, max_value=1000, help_text="At most this many")
    offset = OffsetField(default=0, help_text="Skip this many, by name")


class ConsultRuleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    precondition = serializers.CharField()
    correction = serializers.JSONField()
    require_review = serializers.BooleanField()
    expires_at = serializers.DateTimeField(allow_null=True)


class ConsultPatternSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    category = serializers.CharField()
    description = serializers.CharField()
    occurrence_count = serializers.IntegerField()
    last_seen = serializers.DateTimeField()


class ConsultSerializer(serializers.Serializer):
    action = serializers.CharField()
    autonomy_level = serializers.IntegerField()
    stated_confidence = serializers.FloatField()
    adjusted_confidence = serializers.FloatField()
    pattern_penalty = serializers.FloatField()
    calibration_adjustment = serializers.FloatField()
    require_approval = serializers.BooleanField()
    approval_reasons = serializers.ListField(child=serializers.CharField())
    warnings = serializers.ListField(child=serializers.CharField())
    rules = ConsultRuleSerializer(many=True)
    patterns = ConsultPatternSerializer(many=True)


class TransitionDecisionSerializer(StrictSerializer):
    notes = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=5000,
        validators=[RegexValidator(r"^[^\x00]*$", "Must not contain NUL characters.")],
    )


class TransitionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField(source="action.name")
    from_level = serializers.IntegerField()
    to_level = serializers.IntegerField()
    direction = serializers.CharField()
    status = serializers.CharField(help_text="proposed, applied or rejected")
    reason = serializers.CharField()
    evidence = serializers.JSONField()
    created_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(source="decided_by_label")
    decision_notes = serializers.CharField()


TENANT_HELP = (
    "The action's tenant (slug). A reviewer token spans every tenant of its user and action names are unique per "
    "tenant only: a name several of them use is refused (409 ambiguous) until the tenant is given."
)


def _tenant_field():
    return serializers.RegexField(
        r"^[-a-zA-Z0-9_]{1,60}$",
        max_length=60,
        required=False,
        help_text=TENANT_HELP,
        error_messages={"invalid": "Not a tenant slug."},
    )


class ActionStopSerializer(StrictSerializer):
    reason = serializers.CharField(
        max_length=5000, validators=[RegexValidator(r"^[^\x00]*$", "Must not contain NUL characters.")]
    )
    tenant = _tenant_field()


class ActionStopQuerySerializer(StrictQuerySerializer):
    tenant = _tenant_field()
