"""Proposals, executions, their feedback records, mistake patterns and the correction rules drawn from them."""

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Q
from simple_history.models import HistoricalRecords

from common.history import history_user
from tenants.models import TenantOwned


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


class Proposal(TenantOwned):
    """An action an agent proposes and a human reviews before it runs."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="proposals", db_index=False)
    action = models.ForeignKey("actions.Action", on_delete=models.PROTECT, related_name="proposals", db_index=False)
    proposed_action = models.JSONField()
    reasoning = models.JSONField(default=dict, help_text="The agent's reasoning; 'confidence' in [0, 1].")
    confidence = models.FloatField(help_text="The agent's stated confidence, from reasoning.confidence.")
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.PENDING)
    modified_action = models.JSONField(null=True, blank=True)
    review_notes = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    reviewed_by_key = models.ForeignKey(
        "agents.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
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


class Execution(TenantOwned):
    """An action an agent ran on its own (autonomy level 2 or 3), reviewed afterwards."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="executions", db_index=False)
    action = models.ForeignKey("actions.Action", on_delete=models.PROTECT, related_name="executions", db_index=False)
    params = models.JSONField(default=dict)
    reasoning = models.JSONField(default=dict)
    confidence = models.FloatField()
    success = models.BooleanField()
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    review_outcome = models.CharField(max_length=10, choices=ReviewOutcome.choices, null=True, blank=True)
    review_notes = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    reviewed_by_key = models.ForeignKey(
        "agents.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
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


class FeedbackRecord(TenantOwned):
    """Feedback a human (or an outcome) gave on an agent action; written with the change that caused it."""

    # Single-column FK indexes are left out where a composite or partial index below covers the lookups:
    # a million-row table pays for every index on each insert and on the pattern-linking update.
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="feedback_records", db_index=False)
    action = models.ForeignKey("actions.Action", on_delete=models.PROTECT, related_name="feedback_records", db_index=False)
    proposal = models.ForeignKey(
        Proposal, on_delete=models.CASCADE, null=True, blank=True, related_name="feedback_records", db_index=False
    )
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, null=True, blank=True, related_name="feedback_records", db_index=False
    )
    feedback_type = models.CharField(max_length=20, choices=FeedbackType.choices)
    original_action = models.JSONField(null=True, blank=True)
    corrected_action = models.JSONField(null=True, blank=True)
    correction_delta = models.JSONField(null=True, blank=True, help_text="Computed diff: added, removed, changed keys.")
    human_explanation = models.TextField(blank=True)
    agent_confidence = models.FloatField(null=True, blank=True)
    action_context = models.JSONField(default=dict, blank=True)
    mistake_category = models.CharField(max_length=60, blank=True)
    pattern = models.ForeignKey(
        "MistakePattern", on_delete=models.SET_NULL, null=True, blank=True, related_name="records", db_index=False
    )
    processed = models.BooleanField(default=False)
    processed_at = models.DateTimeField(null=True, blank=True)
    correction_rule = models.ForeignKey(
        "CorrectionRule",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="feedback_records",
        db_index=False,
    )
    created_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    created_by_key = models.ForeignKey(
        "agents.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
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
            # Retention finds old records by age: a BRIN index is a few pages and costs inserts nothing to speak of.
            BrinIndex(fields=["created_at"], name="fbrecord_created_brin", autosummarize=True),
        ]

    def __str__(self):
        return f"{self.feedback_type} on {self.action_id and self.action.name} ({self.agent_id and self.agent.name})"


class PatternStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    MITIGATED = "mitigated", "Mitigated"
    RESOLVED = "resolved", "Resolved"
    DISMISSED = "dismissed", "Dismissed"


class MistakePattern(TenantOwned):
    """A mistake one agent repeated on one action; one row per (agent, action, category)."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="mistake_patterns")
    action = models.ForeignKey("actions.Action", on_delete=models.CASCADE, related_name="mistake_patterns")
    category = models.CharField(max_length=60, help_text="Mistake category, or the feedback type when none was given.")
    feedback_types = ArrayField(
        models.CharField(max_length=20),
        default=list,
        blank=True,
        help_text="The types of the records it grouped, sorted (kept when the records are archived).",
    )
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


class CorrectionRuleStatus(models.TextChoices):
    PENDING = "pending_approval", "Pending approval"
    ACTIVE = "active", "Active"
    INACTIVE = "inactive", "Deactivated"
    EXPIRED = "expired", "Expired"


class CorrectionRule(TenantOwned):
    """Procedural memory: what an agent must do differently for one action."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="correction_rules")
    action = models.ForeignKey("actions.Action", on_delete=models.CASCADE, related_name="correction_rules")
    # A pattern gets a new rule when its mistake recurs after its last rule expired; the old rules stay as history.
    pattern = models.ForeignKey(MistakePattern, on_delete=models.SET_NULL, null=True, blank=True, related_name="correction_rules")
    precondition = models.TextField()
    correction = models.JSONField(help_text='The most common corrected action, or {"require_review": true}.')
    require_review = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=CorrectionRuleStatus.choices, default=CorrectionRuleStatus.ACTIVE)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    approved_at = models.DateTimeField(null=True, blank=True)
    deactivated_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    deactivated_at = models.DateTimeField(null=True, blank=True)

    history = HistoricalRecords(get_user=history_user)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_correctionrule", "Can approve or deactivate correction rules")]
        indexes = [models.Index(fields=["agent", "action", "status"], name="rule_agent_action_status")]
        constraints = [
            models.UniqueConstraint(
                fields=["pattern"],
                condition=Q(status__in=["pending_approval", "active"]),
                name="one_open_rule_per_pattern",
            ),
        ]

    def __str__(self):
        return f"rule #{self.pk} {self.agent} · {self.action}"


class FeedbackRecordArchive(TenantOwned):
    """Feedback records past ``FEEDBACK_RECORD_RETENTION_DAYS``, moved here by ``feedback_records_archive``.

    The same columns as FeedbackRecord (and the same id), plus when it was archived. The
    agent and action keep their constraints; the links to proposals, executions, patterns,
    rules and users are plain ids (no constraint), so archived rows never block a delete
    and keep the id of what they pointed to. Read-only in the admin, exportable as CSV.
    """

    id = models.BigIntegerField(primary_key=True, help_text="The id the record had in FeedbackRecord.")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+", db_index=False)
    action = models.ForeignKey("actions.Action", on_delete=models.PROTECT, related_name="+", db_index=False)
    proposal = models.ForeignKey(
        Proposal, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    execution = models.ForeignKey(
        Execution, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    feedback_type = models.CharField(max_length=20, choices=FeedbackType.choices)
    original_action = models.JSONField(null=True, blank=True)
    corrected_action = models.JSONField(null=True, blank=True)
    correction_delta = models.JSONField(null=True, blank=True)
    human_explanation = models.TextField(blank=True)
    agent_confidence = models.FloatField(null=True, blank=True)
    action_context = models.JSONField(default=dict, blank=True)
    mistake_category = models.CharField(max_length=60, blank=True)
    pattern = models.ForeignKey(
        MistakePattern, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    processed = models.BooleanField(default=False)
    processed_at = models.DateTimeField(null=True, blank=True)
    correction_rule = models.ForeignKey(
        CorrectionRule, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    created_by = models.ForeignKey(
        "auth.User", on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    created_by_key = models.ForeignKey(
        "agents.ApiKey", on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+", db_index=False, db_constraint=False
    )
    source = models.CharField(max_length=20, default="api")
    created_at = models.DateTimeField()
    archived_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "archived feedback record"
        indexes = [
            models.Index(fields=["agent", "created_at"], name="fbarchive_agent_created"),
            models.Index(fields=["created_at"], name="fbarchive_created"),
        ]

    def __str__(self):
        return f"archived {self.feedback_type} #{self.pk}"
