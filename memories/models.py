"""Memories: reusable lessons learned from conversations.

Every memory belongs to exactly one user; nothing here is global.
"""

from django.db import models
from django.db.models import Q
from simple_history.models import HistoricalRecords

from agents.models import private_agent_field
from common.history import history_user
from common.validators import user_id_validator
from embeddings.models import Embedded, embedding_work_indexes, hnsw_index
from tenants.models import TenantOwned

DEFAULT_NAMESPACE = "learning"


class MemoryType(models.TextChoices):
    FAQ = "faq"
    PATTERN = "pattern"
    SNIPPET = "snippet"
    DECISION = "decision"
    PROCEDURE = "procedure"


class MemoryStatus(models.TextChoices):
    CANDIDATE = "candidate"
    VERIFIED = "verified"
    DEPRECATED = "deprecated"


class Memory(TenantOwned, Embedded):
    """One lesson of one user: canonical content plus its lifecycle and fingerprints."""

    namespace = models.CharField(max_length=60, default=DEFAULT_NAMESPACE)
    user_id = models.CharField(max_length=128, validators=[user_id_validator])
    memory_type = models.CharField("type", max_length=20, choices=MemoryType.choices, default=MemoryType.FAQ)
    topic = models.CharField(max_length=200, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    content = models.TextField(help_text="The canonical lesson")
    status = models.CharField(max_length=20, choices=MemoryStatus.choices, default=MemoryStatus.CANDIDATE)
    confidence = models.FloatField(default=0.5)
    hits = models.PositiveIntegerField(default=0)
    streak = models.PositiveIntegerField(default=0, help_text="Consecutive positive retrievals")
    version = models.PositiveIntegerField(default=1)
    simhash = models.CharField(max_length=16, help_text="64-bit SimHash, 16 hex characters")
    content_sha256 = models.CharField(max_length=64)
    agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The agent that stored it",
    )
    private_agent = private_agent_field(
        "The agent with private user data whose user this memory belongs to; empty: the tenant's agents share it"
    )
    source_session_id = models.CharField(max_length=200, blank=True, default="")
    source_message_id = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True, help_text="Filter values (saved from the request's filters)")
    supersedes = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="superseded_by",
        help_text="The older version this memory replaced",
    )
    status_reason = models.TextField(blank=True, default="")
    status_changed_by = models.CharField(max_length=150, blank=True, default="")
    verified_at = models.DateTimeField(null=True, blank=True)
    deprecated_at = models.DateTimeField(null=True, blank=True)
    last_retrieved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding", "hits", "streak", "last_retrieved_at"])

    embedded_field = "content"

    class Meta:
        verbose_name_plural = "memories"
        constraints = [
            # One live copy of a text per user, namespace and owner (a private agent, or the tenant's shared agents):
            # a concurrent duplicate observe cannot insert twice.
            models.UniqueConstraint(
                fields=["tenant", "namespace", "user_id", "content_sha256", "private_agent"],
                condition=~Q(status="deprecated"),
                name="memory_one_live_copy_per_user",
                nulls_distinct=False,
            ),
            models.CheckConstraint(condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="memory_confidence_0_1"),
            models.CheckConstraint(condition=Q(tags__contains=[]), name="memory_tags_is_list"),
            models.CheckConstraint(condition=Q(simhash__regex=r"^[0-9a-f]{16}$"), name="memory_simhash_16_hex"),
            models.CheckConstraint(condition=Q(status__in=["candidate", "verified", "deprecated"]), name="memory_status_valid"),
        ]
        indexes = [
            hnsw_index("memory_embedding_hnsw"),
            models.Index(fields=["user_id", "namespace", "status", "-updated_at"], name="memory_user_status_recent"),
            models.Index(fields=["status", "deprecated_at"], name="memory_status_deprecated_at"),
            models.Index(fields=["user_id", "namespace"], condition=Q(embedding__isnull=True), name="memory_unembedded"),
            *embedding_work_indexes("memory", "content"),
        ]

    def __str__(self):
        return f"[{self.status}/{self.memory_type}] {self.content[:60]}"


class QuarantineStatus(models.TextChoices):
    PENDING = "pending"
    RELEASED = "released"
    DISCARDED = "discarded"


class MemoryQuarantine(TenantOwned):
    """A lesson the write-gate blocked, kept for reviewers. Only a redacted preview is stored."""

    namespace = models.CharField(max_length=60, default=DEFAULT_NAMESPACE)
    user_id = models.CharField(max_length=128, validators=[user_id_validator])
    memory_type = models.CharField("type", max_length=20, choices=MemoryType.choices, default=MemoryType.FAQ)
    topic = models.CharField(max_length=200, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=20, help_text="secret, unstable, too_short or too_specific")
    reason_detail = models.TextField(blank=True, default="")
    finding_kinds = models.JSONField(default=list, blank=True)
    redacted_preview = models.TextField(help_text="The lesson with every secret replaced by [REDACTED:kind]; edit before release")
    status = models.CharField(max_length=20, choices=QuarantineStatus.choices, default=QuarantineStatus.PENDING)
    source_session_id = models.CharField(max_length=200, blank=True, default="")
    source_message_id = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    released_memory = models.ForeignKey(Memory, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    private_agent = private_agent_field(
        "The agent with private user data whose user's lesson this is; released, the memory is its own"
    )
    reviewed_by = models.CharField(max_length=150, blank=True, default="")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "quarantined memory"
        verbose_name_plural = "memory quarantine"
        indexes = [models.Index(fields=["status", "-created_at"], name="memquarantine_status_created")]
        constraints = [models.CheckConstraint(condition=Q(tags__contains=[]), name="memquarantine_tags_is_list")]

    def __str__(self):
        return f"{self.reason}: {self.redacted_preview[:60]}"


class MemoryRetrieval(TenantOwned):
    """Which memories one retrieval returned, so feedback can say ``"last"``. The query itself is not kept.
    An agent with private user data owns its retrievals (``private_agent``), as it owns its memories."""

    namespace = models.CharField(max_length=60, default=DEFAULT_NAMESPACE)
    user_id = models.CharField(max_length=128, validators=[user_id_validator])
    query_sha256 = models.CharField(max_length=64)
    memory_ids = models.JSONField(default=list)
    degraded = models.BooleanField(default=False)
    private_agent = private_agent_field(
        "The agent with private user data that retrieved; empty: a shared agent. Outcomes read only their owner's"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["user_id", "namespace", "-created_at"], name="memretrieval_user_recent")]

    def __str__(self):
        return f"{self.user_id} @ {self.created_at:%Y-%m-%d %H:%M}: {len(self.memory_ids)} memories"


class WriteDecisionKind(models.TextChoices):
    SKIP = "skip"
    MERGE = "merge"


class MemoryWriteDecision(TenantOwned):
    """Why an observed lesson was not stored as a new memory: skipped as a duplicate of, or merged into, ``memory``.

    Keeps the incoming text (redacted) and the evidence of the dedupe rule, for reviewers.
    """

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="write_decisions")
    kind = models.CharField(max_length=10, choices=WriteDecisionKind.choices)
    rule = models.CharField(max_length=40, help_text="exact, simhash_same_substance, simhash or semantic")
    incoming_text = models.TextField(help_text="The observed lesson, secrets replaced by [REDACTED:kind]")
    incoming_simhash = models.CharField(max_length=16, blank=True, default="")
    hamming = models.PositiveSmallIntegerField(null=True, blank=True, help_text="SimHash distance to the memory (0-64)")
    similarity = models.FloatField(null=True, blank=True, help_text="Cosine similarity to the memory; empty without vectors")
    thresholds = models.JSONField(default=dict, blank=True)
    text_changed = models.BooleanField(default=False, help_text="A merge whose longer incoming text replaced the memory's")
    extractor = models.CharField(max_length=80, blank=True, default="")
    source_session_id = models.CharField(max_length=200, blank=True, default="")
    source_message_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["memory", "-created_at"], name="memwritedecision_memory_recent")]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["skip", "merge"]), name="memwritedecision_kind_valid"),
        ]

    def __str__(self):
        return f"{self.kind} ({self.rule}) into memory {self.memory_id}"
