"""What a reviewer holds and what reviewers decided, across every kind of item that waits for a human."""

from django.conf import settings
from django.db import models

from tenants.models import TenantOwned


class Kind(models.TextChoices):
    CANDIDATE = "candidate", "learning candidate"
    PROPOSAL = "proposal", "proposal"
    EXECUTION = "execution", "execution"
    TRANSITION = "transition", "autonomy transition"
    RULE = "rule", "correction rule"
    QUARANTINE = "quarantine", "quarantined memory"
    PROFILE = "profile", "fitted resolution profile"


class Claim(TenantOwned):
    """One reviewer holds one item until ``expires_at``; others see who and cannot decide it meanwhile."""

    kind = models.CharField(max_length=20, choices=Kind.choices)
    object_id = models.BigIntegerField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_claims")
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "object_id"], name="claim_one_per_item")]
        indexes = [models.Index(fields=["user", "expires_at"], name="claim_user_expires")]

    def __str__(self):
        return f"{self.kind} {self.object_id} held by {self.user}"


class Decision(TenantOwned):
    """One decision on an item that waited for review, wherever it was taken (the inbox, an app's admin pages, the
    API): who (a reviewer, or an agent's governance key), what, when and why (the progress figures count these)."""

    class Verdict(models.TextChoices):
        APPROVE = "approve", "approved"
        REJECT = "reject", "rejected"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    object_id = models.BigIntegerField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="review_decisions")
    agent = models.ForeignKey(
        "agents.Agent",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="review_decisions",
        help_text="The agent whose governance key decided through the API (no reviewer then)",
    )
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    category = models.CharField(max_length=40, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    summary = models.CharField(max_length=300, blank=True, default="", help_text="What changed, in one line")
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-decided_at", "-id"]
        indexes = [
            models.Index(fields=["decided_at"], name="decision_decided_at"),
            models.Index(fields=["user", "decided_at"], name="decision_user_decided_at"),
            models.Index(fields=["kind", "object_id"], name="decision_item"),
        ]

    def __str__(self):
        return f"{self.kind} {self.object_id} {self.verdict} by {self.decider}"

    @property
    def decider(self) -> str:
        """Who decided, for people: the reviewer's username, "agent <name>" for an agent's key."""
        if self.user_id:
            return self.user.get_username()
        return f"agent {self.agent.name}" if self.agent_id else "someone"


class BacklogSnapshot(TenantOwned):
    """How many items of one kind waited at the end of a day (the inbox's backlog chart); one row per day and kind."""

    day = models.DateField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    waiting = models.PositiveIntegerField()
    taken_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day", "kind"], name="backlog_one_per_day_and_kind")]
        indexes = [models.Index(fields=["day"], name="backlog_day")]

    def __str__(self):
        return f"{self.day} {self.kind}: {self.waiting}"
