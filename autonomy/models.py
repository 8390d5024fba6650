"""Agents, their API keys, and (later) actions and autonomy levels."""

import hashlib
import secrets

from django.db import models
from simple_history.models import HistoricalRecords


class Scope(models.TextChoices):
    RESOLVE = "resolve", "Resolve"
    FEEDBACK = "feedback", "Feedback"
    GOVERNANCE = "governance", "Governance"


DEFAULT_SCOPES = [Scope.RESOLVE.value, Scope.FEEDBACK.value]


class Agent(models.Model):
    """An AI agent that calls the API with one or more keys."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    # DRF treats request.user as authenticated through this attribute.
    is_authenticated = True
    is_anonymous = False


def hash_key(raw_key: str) -> str:
    """Keys are 256-bit random secrets, so one SHA-256 is enough to store them."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


def generate_key() -> tuple[str, str]:
    """A new key: (raw key shown once, its prefix for display)."""
    prefix = secrets.token_hex(4)
    return f"alg_{prefix}_{secrets.token_urlsafe(32)}", prefix


class ApiKey(models.Model):
    """An agent's API key; only its hash is stored."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True, help_text="Shown to tell keys apart; not secret.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    history = HistoricalRecords(excluded_fields=["last_used_at"])

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} (alg_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and self.agent.is_active

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


# --- out: actions, autonomy levels, correction rules, calibration, transitions, learning episodes (issues 6-7) ---

from django.core.validators import RegexValidator  # noqa: E402

def human_history_user(instance=None, request=None, **kwargs):
    """History rows name a human reviewer only: API requests authenticate an Agent, which is not a User."""
    from django.contrib.auth import get_user_model

    user = getattr(instance, "_history_user", None)
    if user is None and request is not None:
        user = getattr(request, "user", None)
    return user if isinstance(user, get_user_model()) else None


ACTION_NAME_RE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"


class AutonomyLevel(models.IntegerChoices):
    PROPOSE = 1, "1 · propose only"
    ACT_REVIEWED = 2, "2 · act, then be reviewed"
    AUTONOMOUS = 3, "3 · act alone"


class Action(models.Model):
    """An action agents may take, with the autonomy level it runs at.

    The level changes only through an approved ``AutonomyTransition``.
    """

    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[RegexValidator(ACTION_NAME_RE, "Action names are lowercase dotted identifiers such as 'email.send'.")],
    )
    description = models.TextField(blank=True)
    autonomy_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices, default=AutonomyLevel.PROPOSE)
    auto_registered = models.BooleanField(default=False, help_text="Registered because a proposal named it.")
    last_evaluated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords(excluded_fields=["last_evaluated_at"], get_user=human_history_user)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(autonomy_level__gte=1, autonomy_level__lte=3), name="action_level_1_3"),
        ]

    def __str__(self):
        return self.name


class CorrectionRuleStatus(models.TextChoices):
    PENDING = "pending_approval", "Pending approval"
    ACTIVE = "active", "Active"
    INACTIVE = "inactive", "Deactivated"
    EXPIRED = "expired", "Expired"


class CorrectionRule(models.Model):
    """Procedural memory: what an agent must do differently for one action."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="correction_rules")
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="correction_rules")
    pattern = models.OneToOneField(
        "feedback.MistakePattern", on_delete=models.SET_NULL, null=True, blank=True, related_name="correction_rule"
    )
    precondition = models.TextField()
    correction = models.JSONField(help_text="The most common corrected action, or {\"require_review\": true}.")
    require_review = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=CorrectionRuleStatus.choices, default=CorrectionRuleStatus.ACTIVE)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    deactivated_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    deactivated_at = models.DateTimeField(null=True, blank=True)

    history = HistoricalRecords(get_user=human_history_user)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "action", "status"], name="rule_agent_action_status")]

    def __str__(self):
        return f"rule #{self.pk} {self.agent} · {self.action}"


class CalibrationRecord(models.Model):
    """One calibration run for an agent, overall (action NULL) or for one action."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="calibrations")
    action = models.ForeignKey(Action, on_delete=models.CASCADE, null=True, blank=True, related_name="calibrations")
    window_days = models.PositiveIntegerField()
    computed_at = models.DateTimeField(auto_now_add=True, db_index=True)
    sample_count = models.PositiveIntegerField(help_text="Samples in the buckets that count.")
    total_samples = models.PositiveIntegerField(default=0, help_text="All samples in the window.")
    buckets = models.JSONField(help_text="[{low, high, count, mean_confidence, success_rate, gap, counted}]")
    mean_confidence = models.FloatField(null=True)
    mean_success = models.FloatField(null=True)
    ece = models.FloatField(null=True, help_text="Expected Calibration Error: sample-weighted mean |gap|.")
    overconfidence_rate = models.FloatField(default=0.0)
    underconfidence_rate = models.FloatField(default=0.0)
    raw_adjustment = models.FloatField(default=0.0, help_text="This run's adjustment before smoothing.")
    recommended_adjustment = models.FloatField(default=0.0, help_text="EMA-smoothed, capped; negative = overconfident.")
    episode = models.ForeignKey("LearningEpisode", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-computed_at", "-id"]
        indexes = [models.Index(fields=["agent", "action", "-computed_at"], name="calib_agent_action_time")]

    def __str__(self):
        scope = self.action.name if self.action_id else "overall"
        return f"{self.agent} · {scope} · {self.computed_at:%Y-%m-%d %H:%M}"


class TransitionStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    APPLIED = "applied", "Applied"
    REJECTED = "rejected", "Rejected"


class AutonomyTransition(models.Model):
    """A proposed change of an action's autonomy level; applied only by a human."""

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="transitions")
    from_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices)
    to_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices)
    status = models.CharField(max_length=10, choices=TransitionStatus.choices, default=TransitionStatus.PROPOSED)
    evidence = models.JSONField(help_text="Rates, sample size, recent patterns and latest ECE at proposal time.")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    episode = models.ForeignKey("LearningEpisode", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_by_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_notes = models.TextField(blank=True)

    history = HistoricalRecords(get_user=human_history_user)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["action"], condition=models.Q(status="proposed"), name="one_open_transition_per_action"
            ),
        ]

    def __str__(self):
        return f"{self.action} {self.from_level}→{self.to_level} ({self.status})"

    @property
    def direction(self) -> str:
        return "promotion" if self.to_level > self.from_level else "demotion"

    @property
    def decided_by_label(self) -> str:
        if self.decided_by_id:
            return f"user {self.decided_by}"
        if self.decided_by_key_id:
            return f"API key {self.decided_by_key} of {self.decided_by_key.agent}"
        return ""


class EpisodeStatus(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


class LearningEpisode(models.Model):
    """Episodic memory: one learning run and what happened in it, in order."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="episodes")
    kind = models.CharField(max_length=30, default="learning_cycle")
    trigger = models.CharField(max_length=30, default="command", help_text="command, celery, beat, api, admin")
    status = models.CharField(max_length=10, choices=EpisodeStatus.choices, default=EpisodeStatus.RUNNING)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    summary_text = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self):
        return f"episode #{self.pk} {self.kind} {self.agent or 'all agents'} ({self.status})"


class EpisodeEvent(models.Model):
    """One ordered step of an episode: pattern detected, rule created, calibration, autonomy evaluation…"""

    episode = models.ForeignKey(LearningEpisode, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    message = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["episode", "seq"]
        constraints = [models.UniqueConstraint(fields=["episode", "seq"], name="episode_event_seq_unique")]

    def __str__(self):
        return f"{self.seq}. {self.kind}"
