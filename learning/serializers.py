from django.conf import settings
from rest_framework import serializers

from learning import selectors
from learning.models import USER_ID_RE


class UserIdField(serializers.RegexField):
    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 128)
        super().__init__(
            USER_ID_RE,
            error_messages={"invalid": "Malformed user id: use 1-128 letters, digits or _ . : @ -, starting with a letter or digit."},
            **kwargs,
        )


class ResolveRequestSerializer(serializers.Serializer):
    text = serializers.CharField(max_length=settings.RESOLVE_MAX_TEXT_LENGTH, trim_whitespace=True)
    user_id = UserIdField(required=False, allow_null=True)
    domain = serializers.CharField(required=False, allow_null=True, max_length=60)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=settings.RESOLVE_MAX_LIMIT)

    def validate_domain(self, value):
        if value and not selectors.domain_exists(value):
            raise serializers.ValidationError(f"Unknown domain {value!r}.")
        return value or None


class CandidateSerializer(serializers.Serializer):
    verb = serializers.CharField()
    score = serializers.FloatField()
    source = serializers.ChoiceField(
        choices=["user_learned_exact", "user_learned_semantic", "learned_exact", "learned_semantic", "phrase_exact", "phrase_substring", "semantic"]
    )
    matched_phrase = serializers.CharField()
    description = serializers.CharField(allow_blank=True)


class OptionSerializer(serializers.Serializer):
    verb = serializers.CharField()
    display_name = serializers.CharField()
    example = serializers.CharField(allow_blank=True)
    score = serializers.FloatField()


class ResolveResponseSerializer(serializers.Serializer):
    request_id = serializers.UUIDField()
    outcome = serializers.ChoiceField(choices=["resolved", "ambiguous", "no_match"])
    verb = serializers.CharField(allow_null=True)
    candidates = CandidateSerializer(many=True)
    options = OptionSerializer(many=True, required=False, help_text="Present when the outcome is ambiguous.")
    degraded = serializers.BooleanField()
    degraded_reason = serializers.CharField(allow_blank=True, required=False)
