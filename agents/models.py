"""Agents and their API keys with scopes."""

import hashlib
import secrets

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models.lookups import Exact
from simple_history.models import HistoricalRecords

from tenants.models import TenantOwned


class Scope(models.TextChoices):
    RESOLVE = "resolve", "Resolve"
    FEEDBACK = "feedback", "Feedback"
    GOVERNANCE = "governance", "Governance"


DEFAULT_SCOPES = [Scope.RESOLVE.value, Scope.FEEDBACK.value]


def private_agent_field(help_text: str) -> models.ForeignKey:
    """The owner of a user's row written through an agent with private user data (``Agent.private_user_data``); empty:
    the tenant's agents share the row. Part of the row's unique key wherever one user's text has one row."""
    return models.ForeignKey(
        "agents.Agent", null=True, blank=True, on_delete=models.CASCADE, related_name="+", help_text=help_text
    )


class Agent(TenantOwned):
    """An AI agent that calls the API with one or more keys."""

    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    private_user_data = models.BooleanField(
        default=False,
        help_text="Users' learned phrases and memories written through this agent are its own; "
        "by default the tenant's agents share them",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agent_name_unique_per_tenant")]

    def __str__(self):
        return self.name

    # DRF treats request.user as authenticated through this attribute.
    is_authenticated = True
    is_anonymous = False


def hash_key(raw_key: str) -> str:
    """Keys are 256-bit random secrets, so one sha256 digest is enough to store them."""
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
        constraints = [
            models.CheckConstraint(
                condition=Exact(models.Func("scopes", function="jsonb_typeof", output_field=models.CharField()), "array"),
                name="api_key_scopes_array",
                violation_error_message="A key's scopes are a list.",
            )
        ]

    def __str__(self):
        return f"{self.name} (alg_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and self.agent.is_active

    def has_scope(self, scope: str) -> bool:
        """Whether the key's list of scopes names ``scope``; a stored value that is not a list grants nothing."""
        return isinstance(self.scopes, list) and scope in self.scopes


class IdempotentRequest(TenantOwned):
    """A write an agent sent with an ``Idempotency-Key`` header: a retry with the same key gets the stored answer
    instead of applying the write twice. The row is written in the request's own transaction, so it exists exactly
    when the write committed; kept for ``API_IDEMPOTENCY_TTL_S``."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    request_hash = models.CharField(max_length=64, help_text="sha256 of the method, path and body")
    status_code = models.PositiveSmallIntegerField(null=True, help_text="Empty until the request's answer is stored")
    response = models.JSONField(null=True)
    embedding_pending = models.BooleanField(
        default=False, db_default=False, help_text="The answer said X-Embedding-Pending: a retry's answer says it too"
    )
    user_ids = ArrayField(
        models.CharField(max_length=128),
        default=list,
        blank=True,
        help_text="The users the request or its answer named: the erasure of one of them erases the answer",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "key"], name="idempotent_request_unique_key")]
        indexes = [GinIndex(fields=["user_ids"], name="idempotent_request_users")]

    def __str__(self):
        return f"{self.method} {self.path} ({self.key})"
