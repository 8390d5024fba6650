"""Disambiguation events, learning signals, agent outcomes, feedback records and mistake patterns."""

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------

from django.db import models  # noqa: E402
from django.db.models import Q  # noqa: E402

from learning.models import Embedded, hnsw_index, user_id_validator  # noqa: E402


class DisambiguationRequest(models.Model):
    """One ``ambiguous`` answer of the resolver: the options a user was shown and what became of them."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        SELECTED = "selected", "selected"
        ABANDONED = "abandoned", "abandoned"
        EXPIRED = "expired", "expired"

    class Channel(models.TextChoices):
        API = "api", "API"
        CONSOLE = "console", "console"

    request_id = models.UUIDField(unique=True, editable=False)
    agent = models.ForeignKey(
        "autonomy.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="disambiguations",
        help_text="The agent whose key asked; empty for the console",
    )
    channel = models.CharField(max_length=10, choices=Channel.choices, default=Channel.API)
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator], db_index=True)
    text = models.CharField(max_length=2000)
    normalized = models.CharField(max_length=2000)
    domain = models.CharField(max_length=60, blank=True, default="")
    options = models.JSONField(default=list, help_text="[{verb, display_name, example, score}] as shown")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    selected_verb = models.CharField(max_length=120, blank=True, default="")
    selected_args = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True, help_text="When its signals were learned from")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="disamb_status_created")]

    def __str__(self):
        return f"{self.text!r} ({self.status})"

    @property
    def option_verbs(self) -> list[str]:
        return [o["verb"] for o in self.options]


class AbandonEvent(models.Model):
    """A user walked away from the options: typed something else, closed the session, or let it time out."""

    class Reason(models.TextChoices):
        TYPED_NEW_INPUT = "typed_new_input", "typed new input"
        CLOSED_SESSION = "closed_session", "closed session"
        TIMEOUT = "timeout", "timeout"

    request = models.OneToOneField(DisambiguationRequest, on_delete=models.CASCADE, related_name="abandon_event")
    reason = models.CharField(max_length=20, choices=Reason.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.request_id}: {self.reason}"


class LearningSignal(models.Model):
    """Evidence from one disambiguation: a (phrase, verb) pair, positive or negative, with a confidence."""

    class Outcome(models.TextChoices):
        SELECTED_ALT = "selected_alt", "selected alternative"
        GENERATED_VARIANT = "generated_variant", "generated variant"
        REJECTED_ALT = "rejected_alt", "rejected alternative"
        ABANDONED = "abandoned", "abandoned"

    class Source(models.TextChoices):
        USER_DISAMBIGUATION = "user_disambiguation", "user disambiguation"
        GENERATED_VARIANT = "generated_variant", "generated variant"
        USER_ABANDONMENT = "user_abandonment", "user abandonment"

    class Result(models.TextChoices):
        PENDING = "", "pending"
        PROMOTED = "promoted", "promoted to a learned phrase"
        ACCUMULATED = "accumulated", "accumulated in a candidate"
        EVIDENCE = "evidence", "negative evidence"
        IGNORED = "ignored", "below the accumulate threshold"

    request = models.ForeignKey(DisambiguationRequest, on_delete=models.CASCADE, related_name="signals")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    phrase = models.CharField(max_length=2000)
    normalized = models.CharField(max_length=2000, db_index=True)
    verb = models.CharField(max_length=120, db_index=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    source = models.CharField(max_length=20, choices=Source.choices)
    is_negative = models.BooleanField(default=False)
    confidence = models.FloatField()
    rejected_alternatives = models.JSONField(default=list, blank=True)
    result = models.CharField(max_length=12, choices=Result.choices, blank=True, default="")
    candidate_id = models.BigIntegerField(null=True, blank=True, help_text="The learning candidate it fed, if any")
    created_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["request", "normalized", "verb", "outcome"], name="signal_once_per_request"),
            models.CheckConstraint(condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="signal_confidence_0_1"),
        ]

    def __str__(self):
        sign = "✗" if self.is_negative else "→"
        return f"{self.phrase} {sign} {self.verb} ({self.confidence:.2f})"


class PhraseEvidence(Embedded):
    """Aggregated evidence for one (phrase, verb) pair in one user's scope; the resolver reads it near the query."""

    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    phrase = models.CharField(max_length=2000)
    normalized = models.CharField(max_length=2000)
    verb = models.CharField(max_length=120)
    negative = models.FloatField(default=0.0, help_text="Sum of negative signal confidences")
    positive = models.FloatField(default=0.0, help_text="Sum of positive signal confidences")
    signal_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "phrase evidence"
        constraints = [
            models.UniqueConstraint(
                fields=["normalized", "verb", "user_id"], name="phraseevidence_unique_per_scope", nulls_distinct=False
            )
        ]
        indexes = [hnsw_index("phraseevidence_embedding_hnsw"), models.Index(fields=["user_id"], name="phraseevidence_user")]

    def __str__(self):
        return f"{self.phrase} / {self.verb}: -{self.negative:.2f} +{self.positive:.2f}"

    @property
    def net(self) -> float:
        return self.negative - self.positive


# --- out: agent outcomes (proposals, executions), feedback records, mistake patterns (issues 6-7) ---


class ProposalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    MODIFIED = "modified", "Modified"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


# Allowed status changes; everything else answers 409 naming the current status.
PROPOSAL_TRANSITIONS = {
    ProposalStatus.PENDING: {ProposalStatus.APPROVED, ProposalStatus.REJECTED, ProposalStatus.MODIFIED},
    ProposalStatus.APPROVED: {ProposalStatus.COMPLETED, ProposalStatus.FAILED},
    ProposalStatus.MODIFIED: {ProposalStatus.COMPLETED, ProposalStatus.FAILED},
    ProposalStatus.REJECTED: set(),
    ProposalStatus.COMPLETED: set(),
    ProposalStatus.FAILED: set(),
}


class Proposal(models.Model):
    """An action an agent proposes and a human reviews before it runs."""

    agent = models.ForeignKey("autonomy.Agent", on_delete=models.CASCADE, related_name="proposals", db_index=False)
    action = models.ForeignKey("autonomy.Action", on_delete=models.PROTECT, related_name="proposals", db_index=False)
    proposed_action = models.JSONField()
    reasoning = models.JSONField(default=dict, help_text="The agent's reasoning; 'confidence' in [0, 1].")
    confidence = models.FloatField(help_text="The agent's stated confidence, from reasoning.confidence.")
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.PENDING)
    modified_action = models.JSONField(null=True, blank=True)
    review_notes = models.TextField(blank=True)
    reviewed_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                    db_index=False)
    reviewed_by_key = models.ForeignKey("autonomy.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                        db_index=False)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    outcome_result = models.JSONField(null=True, blank=True)
    outcome_error = models.TextField(blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "created_at"], name="proposal_agent_created"),
            models.Index(fields=["action", "created_at"], name="proposal_action_created"),
            models.Index(fields=["status", "created_at"], name="proposal_status_created"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(confidence__gte=0, confidence__lte=1), name="proposal_confidence_0_1"),
        ]

    def __str__(self):
        return f"proposal #{self.pk} {self.action_id and self.action.name} ({self.status})"


class ReviewOutcome(models.TextChoices):
    CORRECT = "correct", "Correct"
    INCORRECT = "incorrect", "Incorrect"


class Execution(models.Model):
    """An action an agent ran on its own (autonomy level 2 or 3), reviewed afterwards."""

    agent = models.ForeignKey("autonomy.Agent", on_delete=models.CASCADE, related_name="executions", db_index=False)
    action = models.ForeignKey("autonomy.Action", on_delete=models.PROTECT, related_name="executions", db_index=False)
    params = models.JSONField(default=dict)
    reasoning = models.JSONField(default=dict)
    confidence = models.FloatField()
    success = models.BooleanField()
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    review_outcome = models.CharField(max_length=10, choices=ReviewOutcome.choices, null=True, blank=True)
    review_notes = models.TextField(blank=True)
    reviewed_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                    db_index=False)
    reviewed_by_key = models.ForeignKey("autonomy.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                        db_index=False)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "created_at"], name="execution_agent_created"),
            models.Index(fields=["action", "created_at"], name="execution_action_created"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(confidence__gte=0, confidence__lte=1), name="execution_confidence_0_1"),
        ]

    def __str__(self):
        return f"execution #{self.pk} {self.action_id and self.action.name}"


class FeedbackType(models.TextChoices):
    REJECTION = "rejection", "Rejection"
    CORRECTION = "correction", "Correction (modified proposal)"
    EXECUTION_INCORRECT = "execution_incorrect", "Execution reviewed incorrect"
    EXECUTION_CORRECT = "execution_correct", "Execution reviewed correct"
    OUTCOME_FAILURE = "outcome_failure", "Outcome failure"
    MANUAL_OVERRIDE = "manual_override", "Manual override"


NEGATIVE_FEEDBACK_TYPES = [
    FeedbackType.REJECTION.value,
    FeedbackType.CORRECTION.value,
    FeedbackType.EXECUTION_INCORRECT.value,
    FeedbackType.OUTCOME_FAILURE.value,
    FeedbackType.MANUAL_OVERRIDE.value,
]


class FeedbackRecord(models.Model):
    """Feedback a human (or an outcome) gave on an agent action; written with the change that caused it."""

    # Single-column FK indexes are left out where a composite or partial index below covers the lookups:
    # a million-row table pays for every index on each insert and on the pattern-linking update.
    agent = models.ForeignKey("autonomy.Agent", on_delete=models.CASCADE, related_name="feedback_records", db_index=False)
    action = models.ForeignKey("autonomy.Action", on_delete=models.PROTECT, related_name="feedback_records", db_index=False)
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, null=True, blank=True, related_name="feedback_records",
                                 db_index=False)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, null=True, blank=True, related_name="feedback_records",
                                  db_index=False)
    feedback_type = models.CharField(max_length=20, choices=FeedbackType.choices)
    original_action = models.JSONField(null=True, blank=True)
    corrected_action = models.JSONField(null=True, blank=True)
    correction_delta = models.JSONField(null=True, blank=True, help_text="Computed diff: added, removed, changed keys.")
    human_explanation = models.TextField(blank=True)
    agent_confidence = models.FloatField(null=True, blank=True)
    action_context = models.JSONField(default=dict, blank=True)
    mistake_category = models.CharField(max_length=60, blank=True)
    pattern = models.ForeignKey("MistakePattern", on_delete=models.SET_NULL, null=True, blank=True, related_name="records",
                                db_index=False)
    processed = models.BooleanField(default=False)
    processed_at = models.DateTimeField(null=True, blank=True)
    correction_rule = models.ForeignKey(
        "autonomy.CorrectionRule", on_delete=models.SET_NULL, null=True, blank=True, related_name="feedback_records",
        db_index=False,
    )
    created_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                   db_index=False)
    created_by_key = models.ForeignKey("autonomy.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                       db_index=False)
    source = models.CharField(max_length=20, default="api", help_text="api, admin, admin_bulk, command")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "created_at"], name="feedback_agent_created"),
            models.Index(fields=["pattern"], name="fbrecord_pattern", condition=Q(pattern__isnull=False)),
            models.Index(fields=["proposal"], name="fbrecord_proposal", condition=Q(proposal__isnull=False)),
            models.Index(fields=["execution"], name="fbrecord_execution", condition=Q(execution__isnull=False)),
            models.Index(fields=["correction_rule"], name="fbrecord_rule", condition=Q(correction_rule__isnull=False)),
        ]

    def __str__(self):
        return f"{self.feedback_type} on {self.action_id and self.action.name} ({self.agent_id and self.agent.name})"


class PatternStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    MITIGATED = "mitigated", "Mitigated"
    RESOLVED = "resolved", "Resolved"
    DISMISSED = "dismissed", "Dismissed"


class MistakePattern(models.Model):
    """A mistake one agent repeated on one action; one row per (agent, action, category)."""

    agent = models.ForeignKey("autonomy.Agent", on_delete=models.CASCADE, related_name="mistake_patterns")
    action = models.ForeignKey("autonomy.Action", on_delete=models.CASCADE, related_name="mistake_patterns")
    category = models.CharField(max_length=60, help_text="Mistake category, or the feedback type when none was given.")
    description = models.TextField()
    common_explanation = models.TextField(blank=True)
    common_correction = models.JSONField(null=True, blank=True)
    occurrence_count = models.PositiveIntegerField()
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    status = models.CharField(max_length=10, choices=PatternStatus.choices, default=PatternStatus.ACTIVE)
    resolution_notes = models.TextField(blank=True)
    resolved_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-last_seen"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "action", "category"], name="mistake_pattern_unique"),
        ]

    def __str__(self):
        return f"{self.agent_id and self.agent.name} · {self.action_id and self.action.name} · {self.category}"


# --- Disambiguation feedback loop (issue 4, dis): fitted resolution profiles -------------


class FittedResolutionProfile(models.Model):
    """Resolve threshold and margin fitted on gold labels (clicks, corrections); live only once a reviewer activates it."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", "proposed"
        ACTIVE = "active", "active"
        RETIRED = "retired", "retired"

    embedding_model = models.CharField(max_length=100)
    resolve_threshold = models.FloatField()
    margin = models.FloatField()
    max_wrong_pct = models.FloatField(help_text="The fit keeps wrong auto-resolutions on the training share at or under this")
    gold_count = models.PositiveIntegerField()
    train_count = models.PositiveIntegerField()
    held_out_count = models.PositiveIntegerField()
    baseline = models.JSONField(default=dict, help_text="The profile in force when fitted: {resolve_threshold, margin}")
    held_out_current = models.JSONField(default=dict, help_text="correct/wrong/asked % on the held-out share with the profile in force")
    held_out_fitted = models.JSONField(default=dict, help_text="correct/wrong/asked % on the held-out share with the fitted values")
    train_fitted = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PROPOSED)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    activated_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="activated_resolution_profiles"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["embedding_model"], condition=Q(status="active"), name="fittedprofile_one_active_per_model")
        ]

    def __str__(self):
        return f"{self.embedding_model}: threshold {self.resolve_threshold:.2f}, margin {self.margin:.2f} ({self.status})"
