"""Request and response shapes of the memory API."""

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.fields import (
    StrictBooleanField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
    StrictTypeMixin,
    UserIdField,
)
from memories.models import MemoryStatus, MemoryType

NAMESPACE_RE = r"^[a-z][a-z0-9_.\-]{0,59}$"

# In the schema too (drf-spectacular turns RegexValidators into patterns): text that is not all
# whitespace (strings are trimmed), never a NUL character.
TEXT = RegexValidator(r"^[^\x00]*[^\s\x00][^\x00]*$", "Must contain text, without NUL characters.")
ANY_TEXT = RegexValidator(r"^[^\x00]*$", "Must not contain NUL characters.")


class TextField(StrictTypeMixin, serializers.CharField):
    def __init__(self, **kwargs):
        kwargs.setdefault("validators", [ANY_TEXT if kwargs.get("allow_blank") else TEXT])
        super().__init__(**kwargs)


class StrictUserIdField(StrictTypeMixin, UserIdField):
    pass


class StrictNamespaceField(StrictTypeMixin, serializers.RegexField):
    def __init__(self, **kwargs):
        super().__init__(NAMESPACE_RE, **kwargs)


class TagsField(serializers.ListField):
    def __init__(self, **kwargs):
        super().__init__(child=TextField(max_length=60), max_length=20, **kwargs)


class FiltersSerializer(StrictSerializer):
    type = StrictChoiceField(choices=MemoryType.choices, required=False)
    topic = TextField(max_length=200, required=False)
    tags = TagsField(required=False)
    metadata = serializers.DictField(required=False, help_text="Exact values the memory's metadata must contain")
    namespace = StrictNamespaceField(required=False)


class ObserveMetaSerializer(StrictSerializer):
    session_id = TextField(max_length=200, required=False, allow_blank=True)
    message_id = TextField(max_length=200, required=False, allow_blank=True)
    type = StrictChoiceField(choices=MemoryType.choices, required=False, help_text="Overrides the extractor's type")
    topic = TextField(max_length=200, required=False, allow_blank=True)
    tags = TagsField(required=False)
    namespace = StrictNamespaceField(required=False)
    filters = serializers.DictField(required=False, help_text="Saved into the memory's metadata; retrieve can filter on them")
    validation_passed = StrictBooleanField(
        required=False,
        help_text="The outcome of what the assistant did before: true promotes, false deprecates the memories it used",
    )
    retrieval_id = StrictIntegerField(
        min_value=1,
        max_value=2**63 - 1,
        required=False,
        help_text="The retrieval an outcome in this turn is about (default: the user's latest one with memories)",
    )


class ObserveRequestSerializer(StrictSerializer):
    user_id = StrictUserIdField()
    user_message = TextField(max_length=settings.MEMORY_MAX_MESSAGE_CHARS)
    assistant_message = TextField(max_length=settings.MEMORY_MAX_MESSAGE_CHARS)
    meta = ObserveMetaSerializer(required=False)


class ObserveResponseSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["saved", "skipped", "merged", "new_version", "blocked"])
    memory_id = serializers.IntegerField(allow_null=True)
    evidence = serializers.DictField(
        help_text=(
            "Which rule decided and why; for blocked, the gate's reason (never the secret); outcome_signal when the user's "
            "turn said whether the memories used before worked (outcome, cue, retrieval_id, memory_ids)"
        )
    )


class RetrieveRequestSerializer(StrictSerializer):
    user_id = StrictUserIdField()
    query = TextField(max_length=settings.RESOLVE_MAX_TEXT_LENGTH)
    filters = FiltersSerializer(required=False)


class MemoryItemSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="memory.pk")
    type = serializers.CharField(source="memory.memory_type")
    topic = serializers.CharField(source="memory.topic")
    tags = serializers.ListField(child=serializers.CharField(), source="memory.tags")
    content = serializers.CharField(source="memory.content")
    status = serializers.ChoiceField(choices=MemoryStatus.choices, source="memory.status")
    score = serializers.FloatField(allow_null=True, help_text="Cosine similarity; null in the fallback")
    confidence = serializers.FloatField(source="memory.confidence")
    hits = serializers.IntegerField(source="memory.hits")
    streak = serializers.IntegerField(source="memory.streak")
    version = serializers.IntegerField(source="memory.version")
    updated_at = serializers.DateTimeField(source="memory.updated_at")


class RetrieveResponseSerializer(serializers.Serializer):
    items = MemoryItemSerializer(many=True)
    block = serializers.CharField(allow_blank=True, help_text="<learning_memories> … </learning_memories>, empty when no item")
    degraded = serializers.BooleanField()
    degraded_reason = serializers.CharField(
        allow_blank=True,
        help_text="embedder_unavailable or no_embeddings (the most recent verified memories answer), or reembedding (after a change of model, memories not yet embedded again were not compared)",
    )
    retrieval_id = serializers.IntegerField(
        allow_null=True, help_text="None for a key without the feedback scope: nothing was logged"
    )


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
                "minItems": 1,
                "maxItems": settings.MEMORY_MAX_FEEDBACK_IDS,
            },
            {"type": "string", "enum": ["last"]},
        ]
    }
)
class MemoryIdsField(serializers.Field):
    default_error_messages = {
        "invalid": 'Use a list of memory ids or "last".',
        "empty": "Give at least one memory id.",
        "too_many": "At most {max} memory ids.",
    }

    def to_internal_value(self, data):
        if data == "last":
            return "last"
        if not isinstance(data, list):
            self.fail("invalid")
        if not data:
            self.fail("empty")
        if len(data) > settings.MEMORY_MAX_FEEDBACK_IDS:
            self.fail("too_many", max=settings.MEMORY_MAX_FEEDBACK_IDS)
        out = []
        for item in data:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item < 2**63:
                self.fail("invalid")
            out.append(item)
        return out

    def to_representation(self, value):
        return value


class MemoryFeedbackRequestSerializer(StrictSerializer):
    user_id = StrictUserIdField()
    memory_ids = MemoryIdsField()
    outcome = StrictChoiceField(choices=["success", "failure"])
    reason = TextField(max_length=500, required=False, allow_blank=True, default="")
    namespace = StrictNamespaceField(required=False)


class MemoryStateSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    status = serializers.ChoiceField(choices=MemoryStatus.choices)
    confidence = serializers.FloatField()
    hits = serializers.IntegerField()
    streak = serializers.IntegerField()
    version = serializers.IntegerField()


class MemoryFeedbackResponseSerializer(serializers.Serializer):
    outcome = serializers.CharField()
    memories = MemoryStateSerializer(many=True)


class MemorySearchRequestSerializer(StrictSerializer):
    user_id = StrictUserIdField()
    query = TextField(max_length=settings.RESOLVE_MAX_TEXT_LENGTH)
    mode = StrictChoiceField(choices=["both", "semantic", "substring"], default="both")
    limit = StrictIntegerField(min_value=1, max_value=50, default=10)
    include_deprecated = StrictBooleanField(default=False)
    filters = FiltersSerializer(required=False)


class SearchHitSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="memory.pk")
    type = serializers.CharField(source="memory.memory_type")
    topic = serializers.CharField(source="memory.topic")
    content = serializers.CharField(source="memory.content")
    status = serializers.ChoiceField(choices=MemoryStatus.choices, source="memory.status")
    score = serializers.FloatField(help_text="Cosine similarity + 0.25 for a literal match")
    semantic_score = serializers.FloatField(source="semantic", allow_null=True)
    matched_by = serializers.ChoiceField(choices=["semantic", "substring", "both"])
    version = serializers.IntegerField(source="memory.version")


class MemorySearchResponseSerializer(serializers.Serializer):
    results = SearchHitSerializer(many=True)
    degraded = serializers.BooleanField()
    degraded_reason = serializers.CharField(allow_blank=True)
