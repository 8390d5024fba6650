"""Serializers of the learning API."""

import re
from datetime import timedelta

from django.conf import settings
from rest_framework import serializers

from common.fields import (
    BoundedIntegerField,
    OffsetField,
    StrictChoiceField,
    StrictQuerySerializer,
    StrictSerializer,
    UserIdField,
    VisibleTextField,
)
from learning import selectors
from learning.importing import FORMATS
from learning.models import AbandonEvent, DisambiguationRequest, LearningCandidate, PhraseBlock, PhraseImportJob
from learning.selectors import STATS_RANGES


class ResolveRequestSerializer(StrictSerializer):
    text = VisibleTextField(max_length=settings.RESOLVE_MAX_TEXT_LENGTH, trim_whitespace=True)
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
        choices=[
            "user_learned_exact",
            "user_learned_semantic",
            "learned_exact",
            "learned_semantic",
            "phrase_exact",
            "phrase_substring",
            "semantic",
            "head",
        ],
        help_text=(
            "Where the verb came from: the user's or a global learned phrase (exact or semantic), a catalogue phrase "
            "(exact, substring), a semantic match on the catalogue, or head: no phrase matched and only the learned "
            "decision's classifier head proposed it (score 0.0, matched_phrase empty); it may still be offered as "
            "an option."
        ),
    )
    matched_phrase = serializers.CharField(allow_blank=True, help_text="The phrase that matched; empty for head")
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
    explanation = serializers.DictField(
        help_text=(
            "Why: rule (learned | prior | fixed | exact), probability that the top verb is right, the cut it was "
            "compared with, fit_version (a number, or 'prior'), margin to the runner-up, blocks and penalties applied "
            "(blocks_unchecked: blocked verbs whose block has no vector of the text's model yet, so it was not compared). "
            "Every rule gives these keys; exact (a trusted exact phrase, nothing computed) gives null probability, cut, "
            "fit_version and margin, no blocks or penalties, and the phrase's confidence and trusted_confidence. "
            "learned and prior also give max_wrong_rate (the operator's target the cut was chosen for; null for a "
            "fit stored before fits recorded it), top_cos "
            "and min_top_cos (the support guard), penalty_guard (true when a penalty alone would have decided an "
            "auto-resolution, so the answer asks), and name_margin: how much "
            "closer the text is to the top verb's name than to any other verb's (null when the fit has no names). "
            "fit_passed_over (only when it happened): the live fit's version and the top verb, when that fit was "
            "trained before the verb had phrases and the catalogue prior, which knows it, decided instead. "
            "fit_outside_labels (only when it happened): the live fit's version, the feature, its value and how many "
            "of the fit's labels had that value, when they were too few (a situation its labels did not hold, such as "
            "a verb with only its catalogue phrases, or a user who has taught no phrase in this scope yet: "
            "user_has_taught) and the "
            "catalogue prior, whose rows hold it, decided instead."
        )
    )


class DisambiguationSelectSerializer(StrictSerializer):
    selected_verb = serializers.CharField(max_length=120)
    args = serializers.DictField(required=False, default=dict, help_text="Arguments for the verb, passed back as given")
    user_id = UserIdField(required=False, allow_null=True, help_text="If given, must be the user the options were shown to")


class DisambiguationAbandonSerializer(StrictSerializer):
    reason = StrictChoiceField(choices=AbandonEvent.Reason.choices)
    user_id = UserIdField(required=False, allow_null=True, help_text="If given, must be the user the options were shown to")


class DisambiguationAnswerSerializer(serializers.Serializer):
    request_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=DisambiguationRequest.Status.choices)
    selected_verb = serializers.CharField(allow_null=True)
    args = serializers.DictField(required=False)
    reason = serializers.CharField(required=False)


class DisambiguationConflictSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    status = serializers.CharField()
    selected_verb = serializers.CharField(allow_null=True)


# Serializers of the learning-governance API: candidates, stats, blocklist, corrections, imports.


EXPIRY_RE = re.compile(r"^([0-9]{1,6})([mhdw])$")
EXPIRY_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
MAX_EXPIRY = timedelta(days=3650)


def parse_expiry(value: str) -> timedelta:
    """``30d``, ``1w``, ``24h``, ``90m`` → timedelta. Raises ValueError for anything else (``30x``, ``-1d``, ``0d``)."""
    match = EXPIRY_RE.match(value.strip().lower())
    if not match:
        raise ValueError(f"Invalid expiry {value!r}: use a positive number and a unit m, h, d or w, such as 30d, 1w or 24h.")
    delta = timedelta(**{EXPIRY_UNITS[match.group(2)]: int(match.group(1))})
    if delta <= timedelta(0):
        raise ValueError(f"Invalid expiry {value!r}: it must be longer than zero.")
    if delta > MAX_EXPIRY:
        raise ValueError(f"Invalid expiry {value!r}: at most 3650 days; omit it for a permanent block.")
    return delta


class ExpiryField(serializers.CharField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            return parse_expiry(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class QuerySerializer(StrictQuerySerializer):
    """Query parameters: a parameter given empty (``?status=``) is an error, not "not given"."""

    def validate(self, attrs):
        blank = {name: ["This parameter may not be empty."] for name in self.fields if self.initial_data.get(name, None) == ""}
        if blank:
            raise serializers.ValidationError(blank)
        return attrs


class CandidateListQuerySerializer(QuerySerializer):
    status = StrictChoiceField(choices=LearningCandidate.Status.choices, required=False)
    type = StrictChoiceField(choices=LearningCandidate.Type.choices, required=False)
    risk_level = StrictChoiceField(choices=LearningCandidate.Risk.choices, required=False)
    min_occurrences = BoundedIntegerField(required=False, min_value=1)
    user_id = UserIdField(required=False, console=True)  # a governance key reviews the console's candidates too
    limit = BoundedIntegerField(required=False, min_value=1, max_value=200)
    offset = OffsetField()


class LearningCandidateSerializer(serializers.ModelSerializer):
    type = serializers.CharField(source="candidate_type")
    reviewed_by = serializers.CharField(source="reviewed_by.get_username", allow_null=True, default=None)
    reviewed_by_agent = serializers.CharField(source="reviewed_by_agent.name", allow_null=True, default=None)

    class Meta:
        model = LearningCandidate
        fields = [
            "id",
            "type",
            "input_pattern",
            "normalized",
            "suggested_output",
            "previous_output",
            "occurrence_count",
            "confidence",
            "source",
            "risk_level",
            "rejected_alternatives",
            "user_id",
            "status",
            "explanation",
            "review_reason",
            "reviewed_by",
            "reviewed_by_agent",
            "reviewed_at",
            "created_at",
            "last_seen_at",
        ]
        read_only_fields = fields


class CandidatePageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = LearningCandidateSerializer(many=True)


class CandidateApproveSerializer(StrictSerializer):
    apply_immediately = serializers.BooleanField(default=True)


class CandidateRejectSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    add_to_blocklist = serializers.BooleanField(default=False)


class StatsQuerySerializer(QuerySerializer):
    time_range = StrictChoiceField(choices=list(STATS_RANGES), default="week")


class TopPendingSerializer(serializers.ModelSerializer):
    type = serializers.CharField(source="candidate_type")

    class Meta:
        model = LearningCandidate
        fields = ["id", "type", "input_pattern", "suggested_output", "user_id", "occurrence_count", "confidence"]


class StatsSerializer(serializers.Serializer):
    time_range = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)
    candidates_by_status = serializers.DictField(child=serializers.IntegerField())
    candidates_total = serializers.IntegerField()
    active_learned_phrases = serializers.IntegerField()
    active_aliases = serializers.IntegerField()
    active_blocklist_entries = serializers.IntegerField()
    top_pending = TopPendingSerializer(many=True)


class BlockCreateSerializer(StrictSerializer):
    phrase = serializers.CharField(max_length=500)
    verb = serializers.CharField(max_length=120)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    scope = StrictChoiceField(choices=["global", "user"], default="global")
    user_id = UserIdField(required=False, allow_null=True)
    expires_in = ExpiryField(
        required=False, allow_null=True, help_text="How long the block lasts: 30d, 1w, 24h, 90m. Omit for a permanent block."
    )

    def validate(self, attrs):
        if attrs["scope"] == "user" and not attrs.get("user_id"):
            raise serializers.ValidationError({"user_id": "A user-scoped block needs a user_id."})
        if attrs["scope"] == "global" and attrs.get("user_id"):
            raise serializers.ValidationError({"user_id": "A global block takes no user_id; use scope 'user'."})
        return attrs


class BlockSerializer(serializers.ModelSerializer):
    verb = serializers.CharField(source="verb.name")
    scope = serializers.SerializerMethodField()
    embedded = serializers.SerializerMethodField()

    class Meta:
        model = PhraseBlock
        fields = [
            "id",
            "phrase",
            "normalized",
            "verb",
            "scope",
            "user_id",
            "reason",
            "source",
            "expires_at",
            "created_at",
            "embedded",
        ]

    def get_scope(self, obj) -> str:
        return "user" if obj.user_id else "global"

    def get_embedded(self, obj) -> bool:
        return obj.embedding is not None


class CorrectionSerializer(StrictSerializer):
    text = VisibleTextField(max_length=500)
    wrong_verb = serializers.CharField(max_length=120)
    correct_verb = serializers.CharField(max_length=120)
    user_id = UserIdField(required=False, allow_null=True)
    request_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="The request_id of the resolve answer the user corrected: labels exactly that answer for the decision "
        "fit (404 unless it was given to this user for this text). Without it, the newest answer to the user for "
        "the text within RESOLUTION_LABEL_MAX_AGE_S (a day) is labelled.",
    )


class PhraseStateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    phrase = serializers.CharField()
    verb = serializers.CharField()
    user_id = serializers.CharField(allow_null=True)
    confidence = serializers.FloatField()
    occurrence_count = serializers.IntegerField()


class CorrectionResultSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["user", "global"])
    user_id = serializers.CharField(allow_null=True)
    phrase = PhraseStateSerializer(allow_null=True, help_text="The phrase row for the text in the scope, after the correction.")
    created = serializers.BooleanField()
    decayed = PhraseStateSerializer(many=True, help_text="The user's phrases for the wrong verb whose confidence decayed.")
    candidate_id = serializers.IntegerField(allow_null=True, help_text="Global corrections: the review candidate recorded.")


class ConfirmationSerializer(StrictSerializer):
    text = VisibleTextField(max_length=500)
    verb = serializers.CharField(max_length=120, help_text="The verb the agent resolved and ran, which the user accepted.")
    user_id = UserIdField(help_text="The user who accepted it; only that user's phrases change.")
    request_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="The request_id of the resolve answer the user accepted: labels exactly that answer for the decision "
        "fit (404 unless it was given to this user for this text). Without it, the newest answer to the user for "
        "the text within RESOLUTION_LABEL_MAX_AGE_S (a day) is labelled.",
    )


class ConfirmationResultSerializer(serializers.Serializer):
    user_id = serializers.CharField()
    phrase = PhraseStateSerializer(help_text="The user's phrase row for the text, after the confirmation.")
    created = serializers.BooleanField()


class ImportRequestSerializer(StrictSerializer):
    format = StrictChoiceField(choices=list(FORMATS))
    content = serializers.CharField(required=False, trim_whitespace=False, help_text="The file's text (JSON requests).")
    file = serializers.FileField(required=False, help_text="The file (multipart uploads).")
    scope = StrictChoiceField(choices=["global", "user"], default="global")
    user_id = UserIdField(required=False, allow_null=True)
    dry_run = serializers.BooleanField(default=False)
    override = serializers.BooleanField(
        default=False,
        help_text="Replace stored phrases a reviewer switched off or the user's correction or confirmation taught another verb "
        "(without it they are kept as they are and counted as kept).",
    )
    background = serializers.BooleanField(
        default=False,
        help_text="Run the import as a job on a worker (202 and the job to poll), however few its rows; imports of "
        "more than LEARNING_IMPORT_SYNC_MAX_ROWS rows always do. A dry run always answers at once.",
    )

    def validate(self, attrs):
        if bool(attrs.get("content")) == bool(attrs.get("file")):
            raise serializers.ValidationError({"content": "Give either content or an uploaded file."})
        if attrs["scope"] == "user" and not attrs.get("user_id"):
            raise serializers.ValidationError({"user_id": "A user-scoped import needs a user_id."})
        if attrs["scope"] == "global" and attrs.get("user_id"):
            raise serializers.ValidationError({"user_id": "A global import takes no user_id; use scope 'user'."})
        return attrs


class ImportErrorRowSerializer(serializers.Serializer):
    row = serializers.IntegerField()
    field = serializers.CharField()
    reason = serializers.CharField()


class ImportResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    scope = serializers.CharField()
    user_id = serializers.CharField(allow_null=True)
    rows = serializers.IntegerField()
    imported = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    kept = serializers.IntegerField(help_text="Stored phrases kept as a reviewer, a correction or a confirmation left them.")
    rejected = serializers.IntegerField()
    unembedded = serializers.IntegerField()
    errors = ImportErrorRowSerializer(many=True)
    would_add = serializers.ListField(child=serializers.CharField(), required=False)
    would_update = serializers.ListField(child=serializers.CharField(), required=False)
    would_keep = serializers.ListField(child=serializers.CharField(), required=False)


class ImportJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=PhraseImportJob.Status.choices)
    scope = serializers.SerializerMethodField()
    user_id = serializers.CharField(allow_null=True)
    rows = serializers.IntegerField(source="row_count", help_text="Rows sent.")
    override = serializers.BooleanField()
    result = ImportResultSerializer(allow_null=True, help_text="What the import did, once it succeeded.")
    errors = ImportErrorRowSerializer(many=True, help_text="The invalid rows of a rejected import (nothing was written).")
    error_code = serializers.CharField(
        help_text="Why it failed: import_invalid (see errors), conflict (another write meanwhile: send it again), "
        "error (unexpected); empty otherwise."
    )
    error_detail = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_scope(self, job) -> str:
        return "user" if job.user_id else "global"


class ImportAcceptedSerializer(serializers.Serializer):
    job = ImportJobSerializer()


# Serializers of the alias API: what a name stands for.


class AliasResolveRequestSerializer(StrictSerializer):
    text = VisibleTextField(max_length=300, help_text="The name as the user wrote it, such as 'big blue'")
    user_id = UserIdField(required=False, allow_null=True, help_text="The user's own aliases answer before global ones")
    entity_type = serializers.CharField(required=False, allow_null=True, max_length=60, help_text="Only aliases of this type")
    limit = serializers.IntegerField(required=False, default=5, min_value=1, max_value=20)


class AliasMatchSerializer(serializers.Serializer):
    alias = serializers.CharField()
    canonical_name = serializers.CharField()
    entity_type = serializers.CharField()
    scope = serializers.ChoiceField(choices=["user", "global"])
    user_id = serializers.CharField(allow_null=True)
    confidence = serializers.FloatField()
    score = serializers.FloatField(help_text="1.0 for an exact match, else the cosine similarity")
    match = serializers.ChoiceField(choices=["exact", "semantic"])


class AliasResolveResponseSerializer(serializers.Serializer):
    text = serializers.CharField()
    normalized = serializers.CharField()
    outcome = serializers.ChoiceField(choices=["exact", "semantic", "no_match"])
    canonical_name = serializers.CharField(allow_null=True, help_text="The best match's canonical name")
    entity_type = serializers.CharField(allow_null=True)
    matches = AliasMatchSerializer(many=True)
    degraded = serializers.BooleanField()
    degraded_reason = serializers.CharField(allow_blank=True)
