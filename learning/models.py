"""Verbs, learned phrases, entity aliases and the phrase blocklist.

Every text that is matched semantically carries its vector, the model that
made it and the hash of the text it was made from, so a model or text change
is detected (``stale``) and re-embedded by ``backfill_embeddings``.
``user_id`` NULL means global; a value scopes the row to one end user.
"""

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from pgvector.django import HnswIndex, VectorField
from simple_history.models import HistoricalRecords

from learning.embeddings import DIMENSION

VERB_NAME_RE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
verb_name_validator = RegexValidator(VERB_NAME_RE, "Use a dotted lowercase name such as cbu.create.")
USER_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,127}$"
user_id_validator = RegexValidator(USER_ID_RE, "Use 1-128 letters, digits or _ . : @ -, starting with a letter or digit.")


class Embedded(models.Model):
    """A row whose text has a vector."""

    embedding = VectorField(dimensions=DIMENSION, null=True, blank=True)
    embedding_model = models.CharField(max_length=100, blank=True, default="")
    embedding_hash = models.CharField(max_length=64, blank=True, default="", help_text="SHA-256 of the embedded text")

    #: The field holding the text the vector is computed from.
    embedded_field = "normalized"

    class Meta:
        abstract = True

    @property
    def embedding_text(self) -> str:
        return getattr(self, self.embedded_field)

    @property
    def has_embedding(self) -> bool:
        return self.embedding is not None


def hnsw_index(name: str) -> HnswIndex:
    return HnswIndex(name=name, fields=["embedding"], m=16, ef_construction=64, opclasses=["vector_cosine_ops"])


def history_user(request=None, **kwargs):
    """The Django user behind a change for the audit history; agents calling the API (not users) record none."""
    user = getattr(request, "user", None)
    return user if isinstance(user, AbstractBaseUser) and user.is_authenticated else None


class Verb(models.Model):
    """An action the agent can run, such as ``cbu.create``."""

    name = models.CharField(max_length=120, unique=True, validators=[verb_name_validator])
    domain = models.CharField(max_length=60, db_index=True)
    display_name = models.CharField(max_length=120, blank=True)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(get_user=history_user)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def label(self) -> str:
        return self.display_name or self.name.split(".", 1)[-1].replace("_", " ").capitalize()


class VerbPhrase(Embedded):
    """An invocation phrase from the verb catalogue."""

    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="phrases")
    text = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["verb", "normalized"], name="verbphrase_unique_per_verb")]
        indexes = [hnsw_index("verbphrase_embedding_hnsw")]

    def __str__(self):
        return self.text


class LearnedPhrase(Embedded):
    """A phrase learned to mean a verb, globally or for one user: a semantic anchor."""

    phrase = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500)
    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="learned_phrases")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    confidence = models.FloatField(default=1.0)
    occurrence_count = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=40, default="manual")
    is_active = models.BooleanField(default=True)
    last_matched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding", "last_matched_at"])

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["normalized", "user_id"], name="learnedphrase_one_verb_per_scope", nulls_distinct=False
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="learnedphrase_confidence_0_1"
            ),
        ]
        indexes = [
            hnsw_index("learnedphrase_embedding_hnsw"),
            models.Index(fields=["user_id", "normalized"], name="learnedphrase_user_norm"),
        ]

    def __str__(self):
        scope = self.user_id or "global"
        return f"{self.phrase} → {self.verb_id} ({scope})"


class EntityAlias(Embedded):
    """Another name for an entity (``big blue`` → ``IBM``), globally or for one user."""

    alias = models.CharField(max_length=300)
    normalized = models.CharField(max_length=300)
    canonical_name = models.CharField(max_length=300)
    entity_type = models.CharField(max_length=60, default="entity")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    confidence = models.FloatField(default=1.0)
    occurrence_count = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=40, default="manual")
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding"])

    class Meta:
        verbose_name_plural = "entity aliases"
        constraints = [
            models.UniqueConstraint(
                fields=["normalized", "entity_type", "user_id"], name="entityalias_unique_per_scope", nulls_distinct=False
            )
        ]
        indexes = [hnsw_index("entityalias_embedding_hnsw")]

    def __str__(self):
        return f"{self.alias} → {self.canonical_name}"


class PhraseBlock(Embedded):
    """A blocked (phrase, verb) pair: the verb is never offered for that phrase or its paraphrases."""

    phrase = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500)
    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="blocks")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=40, default="manual")
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding"])

    class Meta:
        verbose_name = "blocklist entry"
        verbose_name_plural = "blocklist"
        constraints = [
            models.UniqueConstraint(
                fields=["normalized", "verb", "user_id"], name="phraseblock_unique_per_scope", nulls_distinct=False
            )
        ]
        indexes = [hnsw_index("phraseblock_embedding_hnsw")]

    def __str__(self):
        return f"{self.phrase} ✗ {self.verb_id}"


# --- Learning governance (issue 3, gov) -----------------------------------------


class LearningCandidate(models.Model):
    """A proposed learning waiting for (or past) review.

    The same proposal (type, normalized input, suggested output, user scope)
    is pending at most once: arriving again raises ``occurrence_count``.
    """

    class Type(models.TextChoices):
        INVOCATION_PHRASE = "invocation_phrase", "invocation phrase"
        ENTITY_ALIAS = "entity_alias", "entity alias"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"
        APPLIED = "applied", "applied"

    class Risk(models.TextChoices):
        LOW = "low", "low"
        MEDIUM = "medium", "medium"
        HIGH = "high", "high"

    candidate_type = models.CharField(max_length=20, choices=Type.choices, default=Type.INVOCATION_PHRASE)
    input_pattern = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500)
    suggested_output = models.CharField(max_length=300, help_text="A verb name, or the canonical entity name for an alias")
    previous_output = models.CharField(max_length=300, blank=True, default="")
    occurrence_count = models.PositiveIntegerField(default=1)
    confidence = models.FloatField(default=0.5)
    source = models.CharField(max_length=40, default="feedback")
    risk_level = models.CharField(max_length=10, choices=Risk.choices, default=Risk.LOW)
    rejected_alternatives = models.JSONField(default=list, blank=True)
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    explanation = models.TextField(blank=True, default="", help_text="The user's own explanation, if any")
    review_reason = models.TextField(blank=True, default="")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="reviewed_candidates"
    )
    reviewed_by_agent = models.ForeignKey(
        "autonomy.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="reviewed_candidates",
        help_text="The agent whose governance key decided through the API",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_seen_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords(get_user=history_user)

    class Meta:
        ordering = ["-occurrence_count", "-last_seen_at"]
        permissions = [("review_learningcandidate", "Can approve or reject learning candidates")]
        constraints = [
            models.UniqueConstraint(
                fields=["candidate_type", "normalized", "suggested_output", "user_id"],
                condition=Q(status="pending"),
                nulls_distinct=False,
                name="candidate_one_pending_per_proposal",
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="candidate_confidence_0_1"
            ),
            models.CheckConstraint(condition=Q(occurrence_count__gte=1), name="candidate_occurrences_positive"),
        ]
        indexes = [
            models.Index(fields=["status", "-occurrence_count", "-last_seen_at"], name="candidate_review_queue"),
        ]

    def __str__(self):
        scope = self.user_id or "global"
        return f"{self.input_pattern} → {self.suggested_output} ({scope}, {self.status})"


# --- Memories (issue 5, mem): defined in learning/memory_models.py, imported so Django registers them.
from learning import memory_models as _memory_models  # noqa: E402,F401
