"""The verb catalogue, learned phrases, entity aliases, the phrase blocklist, learning candidates, and the
questions the resolver asks (disambiguation requests), the signals their answers give, phrase evidence and
fitted resolution profiles.

Every text that is matched semantically carries its vector, the model that
made it and the hash of the text it was made from, so a model or text change
is detected (``stale``) and re-embedded by ``backfill_embeddings``.
``user_id`` NULL means global; a value scopes the row to one end user.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from simple_history.models import HistoricalRecords

from agents.models import private_agent_field
from common.history import history_user
from common.validators import user_id_validator
from embeddings.models import Embedded, embedding_work_indexes, hnsw_index
from tenants.models import TenantOwned

VERB_NAME_RE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
DOMAIN_RE = r"^[a-z][a-z0-9_]*$"  # a verb's domain: what resolve's ``domain`` and a catalogue file name it by
verb_name_validator = RegexValidator(VERB_NAME_RE, "Use a dotted lowercase name such as cbu.create.")


class Verb(TenantOwned):
    """An action the agent can run, such as ``cbu.create``."""

    name = models.CharField(max_length=120, validators=[verb_name_validator])
    domain = models.CharField(max_length=60, db_index=True)
    display_name = models.CharField(max_length=120, blank=True)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(get_user=history_user)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="verb_name_unique_per_tenant")]

    def __str__(self):
        return self.name

    @property
    def label(self) -> str:
        return verb_label(self.name, self.display_name)


def verb_label(name: str, display_name: str = "") -> str:
    """What a person sees for a verb: its display name, else its last part in words (``cbu.create`` -> Create)."""
    return display_name or name.split(".", 1)[-1].replace("_", " ").capitalize()


class VerbPhrase(TenantOwned, Embedded):
    """An invocation phrase from the verb catalogue."""

    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="phrases")
    text = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500, db_index=True)

    backfill_order = 10  # the catalogue's semantic tier and the new model's prior wait for these

    class Meta:
        constraints = [models.UniqueConstraint(fields=["verb", "normalized"], name="verbphrase_unique_per_verb")]
        indexes = [hnsw_index("verbphrase_embedding_hnsw"), *embedding_work_indexes("verbphrase")]

    def __str__(self):
        return self.text


class CatalogueStamp(TenantOwned):
    """The version of a tenant's catalogue. Triggers on verbs and catalogue phrases (``learning/triggers.py``)
    set it from one global sequence on every change, so a process that keeps the catalogue in memory knows with
    one small query whether its copy is current."""

    version = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant"], name="cataloguestamp_one_per_tenant")]

    def __str__(self):
        return f"catalogue v{self.version}"


class LearnedPhrase(TenantOwned, Embedded):
    """A phrase learned to mean a verb, globally or for one user: a semantic anchor."""

    phrase = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500)
    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="learned_phrases")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    confidence = models.FloatField(default=1.0)
    occurrence_count = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=40, default="manual")
    agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The agent whose user taught it (none: imported or approved by a reviewer)",
    )
    private_agent = private_agent_field(
        "The agent with private user data whose user's phrase this is; empty: the tenant's agents share it"
    )
    is_active = models.BooleanField(default=True)
    last_matched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    backfill_order = 20  # the learned anchors (tiers 3-4) before the evidence and aliases that grow with every signal

    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding", "last_matched_at"])

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "normalized", "user_id", "private_agent"],
                name="learnedphrase_one_verb_per_scope",
                nulls_distinct=False,
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="learnedphrase_confidence_0_1"
            ),
        ]
        indexes = [
            hnsw_index("learnedphrase_embedding_hnsw"),
            # the global phrases alone: resolving walks them apart from users' phrases (tiers.tier_rows)
            hnsw_index("learnedphrase_global_hnsw", condition=Q(user_id__isnull=True)),
            models.Index(fields=["tenant", "user_id", "normalized"], name="learnedphrase_user_norm"),
            # the active phrases' counts (admin index, stats) read this, not the table and its vectors
            models.Index(fields=["tenant", "private_agent"], condition=Q(is_active=True), name="learnedphrase_active"),
            *embedding_work_indexes("learnedphrase"),
        ]

    def __str__(self):
        scope = self.user_id or "global"
        return f"{self.phrase} → {self.verb_id} ({scope})"


class EntityAlias(TenantOwned, Embedded):
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
                fields=["tenant", "normalized", "entity_type", "user_id"],
                name="entityalias_unique_per_scope",
                nulls_distinct=False,
            )
        ]
        indexes = [
            hnsw_index("entityalias_embedding_hnsw"),
            # a lookup's scope (the user's and the global aliases, of one entity type): the nearest aliases are
            # counted, then compared exactly or walked, through it, not through the unique index that leads with the
            # text
            models.Index(fields=["tenant", "user_id", "entity_type"], condition=Q(is_active=True), name="entityalias_scope"),
            *embedding_work_indexes("entityalias"),
        ]

    def __str__(self):
        return f"{self.alias} → {self.canonical_name}"


class PhraseBlock(TenantOwned, Embedded):
    """A blocked (phrase, verb) pair: the verb is never offered for that phrase or its paraphrases."""

    phrase = models.CharField(max_length=500)
    normalized = models.CharField(max_length=500)
    verb = models.ForeignKey(Verb, on_delete=models.CASCADE, related_name="blocks")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=40, default="manual")
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    backfill_order = 0  # until a block is embedded again, its verb is never offered for any text that resolves
    history = HistoricalRecords(get_user=history_user, excluded_fields=["embedding"])

    class Meta:
        verbose_name = "blocklist entry"
        verbose_name_plural = "blocklist"
        constraints = [
            models.UniqueConstraint(
                fields=["normalized", "verb", "user_id"], name="phraseblock_unique_per_scope", nulls_distinct=False
            )
        ]
        indexes = [hnsw_index("phraseblock_embedding_hnsw"), *embedding_work_indexes("phraseblock")]

    def __str__(self):
        return f"{self.phrase} ✗ {self.verb_id}"


# --- Learning governance ---


class LearningCandidate(TenantOwned):
    """A proposed learning waiting for (or past) review.

    The same proposal (type, normalized input, suggested output, user scope and, for an agent with private user
    data, that agent) is pending at most once: arriving again raises ``occurrence_count``.
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
    proposed_by_agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="proposed_candidates",
        help_text="The agent whose user's interaction proposed it; that agent's keys may not decide it",
    )
    seen_by_agents = ArrayField(
        models.BigIntegerField(),
        default=list,
        blank=True,
        help_text="Ids of every agent whose traffic proposed or repeated it; none of them may decide it",
    )
    private_agent = private_agent_field(
        "The agent with private user data whose user's proposal this is (only its traffic adds to it); empty: the "
        "tenant's agents share it"
    )
    reviewed_by_agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reviewed_candidates",
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
                fields=["tenant", "candidate_type", "normalized", "suggested_output", "user_id", "private_agent"],
                condition=Q(status="pending"),
                nulls_distinct=False,
                name="candidate_one_pending_per_proposal",
            ),
            models.CheckConstraint(condition=Q(confidence__gte=0.0) & Q(confidence__lte=1.0), name="candidate_confidence_0_1"),
            models.CheckConstraint(condition=Q(occurrence_count__gte=1), name="candidate_occurrences_positive"),
        ]
        indexes = [
            models.Index(fields=["status", "-occurrence_count", "-last_seen_at"], name="candidate_review_queue"),
        ]

    def __str__(self):
        scope = self.user_id or "global"
        return f"{self.input_pattern} → {self.suggested_output} ({scope}, {self.status})"


class DisambiguationRequest(TenantOwned):
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
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="disambiguations",
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
    sweep_failures = models.PositiveSmallIntegerField(
        default=0, db_default=0, help_text="Sweeps that failed to learn from its signals (none past the limit)"
    )
    sweep_after = models.DateTimeField(null=True, blank=True, help_text="The sweep tries it again from then on")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="disamb_status_created")]

    def __str__(self):
        return f"{self.text!r} ({self.status})"

    @property
    def option_verbs(self) -> list[str]:
        return [o["verb"] for o in self.options]


class AbandonEvent(TenantOwned):
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


class LearningSignal(TenantOwned):
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
    global_candidate_id = models.BigIntegerField(
        null=True, blank=True, help_text="The global candidate a click counted toward, if any (one occurrence of it)"
    )
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


class PhraseEvidence(TenantOwned, Embedded):
    """Aggregated evidence for one (phrase, verb) pair in one user's scope; the resolver reads it near the query."""

    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    phrase = models.CharField(max_length=2000)
    normalized = models.CharField(max_length=2000)
    verb = models.CharField(max_length=120)
    negative = models.FloatField(default=0.0, help_text="Sum of negative signal confidences")
    positive = models.FloatField(default=0.0, help_text="Sum of positive signal confidences")
    signal_count = models.PositiveIntegerField(default=0)
    private_agent = private_agent_field(
        "The agent with private user data whose users this is about; empty: the tenant's agents share it"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "phrase evidence"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "normalized", "verb", "user_id", "private_agent"],
                name="phraseevidence_unique_per_tenant_scope",
                nulls_distinct=False,
            )
        ]
        indexes = [
            hnsw_index("phraseevidence_embedding_hnsw"),
            models.Index(fields=["user_id"], name="phraseevidence_user"),
            # a scope's rows counted on every resolve (learning.selectors.tiers.learned_exact)
            models.Index(fields=["tenant", "user_id", "private_agent"], name="phraseevidence_user_scope"),
            *embedding_work_indexes("phraseevidence"),
        ]

    def __str__(self):
        return f"{self.phrase} / {self.verb}: -{self.negative:.2f} +{self.positive:.2f}"

    @property
    def net(self) -> float:
        return self.negative - self.positive


class FittedResolutionProfile(TenantOwned):
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
    held_out_current = models.JSONField(
        default=dict, help_text="correct/wrong/asked % on the held-out share with the profile in force"
    )
    held_out_fitted = models.JSONField(
        default=dict, help_text="correct/wrong/asked % on the held-out share with the fitted values"
    )
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
            models.UniqueConstraint(
                fields=["tenant", "embedding_model"], condition=Q(status="active"), name="fittedprofile_one_active_per_model"
            )
        ]

    def __str__(self):
        return f"{self.embedding_model}: threshold {self.resolve_threshold:.2f}, margin {self.margin:.2f} ({self.status})"


# --- The learned auto-resolve decision ---


class ResolutionRecord(TenantOwned):
    """One answer of the resolver with its explanation; the label arrives later (click, confirmation, correction,
    abandon) and feeds the decision fit. Purged after RESOLUTION_RETENTION_DAYS."""

    class Rule(models.TextChoices):
        LEARNED = "learned", "learned fit"
        PRIOR = "prior", "catalogue prior"
        FIXED = "fixed", "fixed threshold"
        EXACT = "exact", "trusted exact phrase"

    class Outcome(models.TextChoices):  # learning.resolution.Outcome's values
        RESOLVED = "resolved", "resolved"
        AMBIGUOUS = "ambiguous", "ambiguous"
        NO_MATCH = "no_match", "no match"

    class LabelSource(models.TextChoices):
        CLICK = "click", "click"
        CONFIRMATION = "confirmation", "confirmation"
        CORRECTION = "correction", "correction"
        ABANDON = "abandon", "abandon"

    request_id = models.UUIDField(unique=True, editable=False)
    agent = models.ForeignKey("agents.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    text = models.CharField(max_length=2000)
    normalized = models.CharField(max_length=2000)
    domain = models.CharField(max_length=60, blank=True, default="")
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    verb = models.CharField(max_length=120, blank=True, default="", help_text="The verb run (resolved only)")
    top_verb = models.CharField(max_length=120, blank=True, default="", help_text="The ranking's top verb")
    top_verbs = models.JSONField(default=list, blank=True)
    rule = models.CharField(max_length=10, choices=Rule.choices)
    features = models.JSONField(null=True, blank=True, help_text="learning.decision.FEATURES order")
    features_open = models.JSONField(null=True, blank=True, help_text="The same query scored without its top verb")
    embedding_model = models.CharField(
        max_length=100, blank=True, default="", help_text="The query's embedding model: the space its features were measured in"
    )
    probability = models.FloatField(null=True, blank=True)
    cut = models.FloatField(null=True, blank=True)
    fit_version = models.PositiveIntegerField(null=True, blank=True)
    margin = models.FloatField(null=True, blank=True, help_text="Top minus runner-up ranking score")
    blocks = models.JSONField(default=list, blank=True)
    penalties = models.JSONField(default=dict, blank=True)
    degraded_reason = models.CharField(max_length=200, blank=True, default="")
    explanation = models.JSONField(
        null=True,
        blank=True,
        default=dict,
        help_text="The answer's explanation as given: every key, those stored above too (empty or null: from before it was kept)",
    )
    shadow_version = models.PositiveIntegerField(null=True, blank=True)
    shadow_outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True, default="")
    shadow_verb = models.CharField(max_length=120, blank=True, default="")
    label = models.BooleanField(null=True, blank=True, help_text="The top verb was right")
    shadow_label = models.BooleanField(null=True, blank=True, help_text="The shadow fit's top verb was right")
    label_source = models.CharField(max_length=12, choices=LabelSource.choices, blank=True, default="")
    gold_verb = models.CharField(max_length=120, blank=True, default="")
    labelled_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user_id", "normalized", "-created_at"], name="resrecord_user_text")]

    def __str__(self):
        return f"{self.text!r} → {self.outcome} {self.verb or ''}"


class DecisionFit(TenantOwned):
    """A versioned fit of the auto-resolve decision (and the classifier heads trained with it)."""

    class Source(models.TextChoices):
        PRIOR = "prior", "catalogue prior"
        LABELS = "labels", "users' labels"

    class Status(models.TextChoices):
        CANDIDATE = "candidate", "candidate"
        SHADOW = "shadow", "shadow"
        LIVE = "live", "live"
        RETIRED = "retired", "retired"

    version = models.PositiveIntegerField(help_text="Counts a tenant's fits: v1, v2, ...")
    source = models.CharField(max_length=10, choices=Source.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CANDIDATE, db_index=True)
    pinned = models.BooleanField(default=False, help_text="A reviewer holds it live: no automatic promotion replaces it")
    embedding_model = models.CharField(max_length=100)
    params = models.JSONField(null=True, blank=True, help_text="Coefficients, standardisation, cut, support floor")
    n_labels = models.PositiveIntegerField(default=0)
    held_out = models.JSONField(default=dict, blank=True, help_text="This fit, out-of-fold: right/wrong/asked shares")
    held_out_in_use = models.JSONField(
        default=dict,
        blank=True,
        help_text="The fit in use on the new fit's labels it did not learn from (n of them)",
    )
    in_use_version = models.PositiveIntegerField(null=True, blank=True)
    shadow_figures = models.JSONField(default=dict, blank=True, help_text="Labels that arrived while it ran in shadow")
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    shadow_since = models.DateTimeField(null=True, blank=True)
    heads_pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="Its heads were deleted (an old retired fit): it can no longer go live"
    )
    promoted_at = models.DateTimeField(null=True, blank=True)
    promoted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="promoted_decision_fits"
    )

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "version"], name="decisionfit_version_unique_per_tenant"),
            models.UniqueConstraint(fields=["tenant", "status"], condition=Q(status="live"), name="decisionfit_one_live"),
            models.UniqueConstraint(fields=["tenant", "status"], condition=Q(status="shadow"), name="decisionfit_one_shadow"),
        ]

    def __str__(self):
        return f"decision fit v{self.version} ({self.source}, {self.status}{', pinned' if self.pinned else ''})"


class DecisionHead(TenantOwned):
    """A classifier head of a fit: the deployment's (user_id NULL) or one user's (trained on that user's phrases only)."""

    fit = models.ForeignKey(DecisionFit, on_delete=models.CASCADE, related_name="heads")
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    weights = models.BinaryField(help_text="npz: W (d x V), b (V), classes, verbs")
    anchors = models.JSONField(default=dict, help_text="{verb: anchors it was trained on}")
    inputs_digest = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="sha256 of what it was trained on: a later fit with the same inputs reuses it",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["fit", "user_id"], name="decisionhead_one_per_scope", nulls_distinct=False)
        ]

    def __str__(self):
        return f"head of v{self.fit_id} ({self.user_id or 'deployment'})"


class DecisionFitEvent(TenantOwned):
    """Every switch of the fit in use (automatic promotion, pin, unpin, roll back)."""

    fit = models.ForeignKey(DecisionFit, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=20)
    previous_version = models.PositiveIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"v{self.fit.version}: {self.action}"


class PhraseImportJob(TenantOwned):
    """A bulk import of learned phrases run by a worker (``POST /api/v1/learning/import`` of many rows): its rows
    until it finishes, then its outcome. It runs in the tenant, and as the agent, of the request that made it."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"

    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    rows = models.JSONField(default=list, blank=True, help_text="[{number, phrase, verb}] to import; emptied once it ends")
    row_count = models.PositiveIntegerField(default=0)
    user_id = models.CharField(max_length=128, null=True, blank=True, validators=[user_id_validator])
    dry_run = models.BooleanField(default=False)
    override = models.BooleanField(default=False)
    source = models.CharField(max_length=40, default="import")
    agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The agent whose key sent the import",
    )
    private_agent = private_agent_field("The agent with private user data that sent it: no other agent reads it")
    result = models.JSONField(null=True, blank=True, help_text="What the import answered (counts), once it succeeded")
    errors = models.JSONField(default=list, blank=True, help_text="[{row, field, reason}] of a rejected import")
    error_code = models.CharField(max_length=40, blank=True, default="")
    error_detail = models.TextField(blank=True, default="", help_text="Why it failed")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "succeeded", "failed"]), name="phraseimportjob_status_valid"
            ),
        ]

    def __str__(self):
        return f"import of {self.row_count} rows ({self.user_id or 'global'}, {self.status})"
