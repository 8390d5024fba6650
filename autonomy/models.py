"""Calibration, autonomy transitions and the episodes of autonomy cycles."""

from django.db import models
from simple_history.models import HistoricalRecords

from actions.models import Action, AutonomyLevel
from agents.models import Agent, ApiKey
from common.history import history_user
from tenants.models import TenantOwned


class CalibrationRecord(TenantOwned):
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
    episode = models.ForeignKey("Episode", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

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


class AutonomyTransition(TenantOwned):
    """A proposed change of an action's autonomy level; applied only by a human."""

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="transitions")
    from_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices)
    to_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices)
    status = models.CharField(max_length=10, choices=TransitionStatus.choices, default=TransitionStatus.PROPOSED)
    evidence = models.JSONField(help_text="Rates, sample size, recent patterns and latest ECE at proposal time.")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    episode = models.ForeignKey("Episode", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_by_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_notes = models.TextField(blank=True)

    history = HistoricalRecords(get_user=history_user)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_autonomytransition", "Can approve or reject autonomy transitions")]
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


class Episode(TenantOwned):
    """Episodic memory: one learning run and what happened in it, in order."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="episodes")
    kind = models.CharField(max_length=30, default="autonomy_cycle")
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


class EpisodeEvent(TenantOwned):
    """One ordered step of an episode: pattern detected, rule created, calibration, autonomy evaluation…"""

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="events")
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
