"""Admin screens of the verb catalogue, learned phrases, entity aliases and the blocklist."""

from django.contrib import admin

from common.admin import HistoryAdmin, revert_link
from embeddings.admin import EmbeddingStatusMixin
from learning.models import (
    EntityAlias,
    LearnedPhrase,
    PhraseBlock,
    Verb,
    VerbPhrase,
)
from tenants.admin import TenantChoiceMixin

"""Admin screens of the learning app: catalogue, learned phrases, aliases, blocks, candidate review,
disambiguation requests, signals, evidence and fitted profiles."""


class VerbPhraseInline(EmbeddingStatusMixin, admin.TabularInline):
    model = VerbPhrase
    extra = 0
    fields = ["text", "normalized", "embedding_model", "embedded"]
    readonly_fields = ["normalized"]


@admin.register(Verb)
class VerbAdmin(TenantChoiceMixin, HistoryAdmin):
    list_display = ["name", "domain", "display_name", "is_active", "updated_at"]
    list_filter = ["domain", "is_active"]
    search_fields = ["name", "display_name", "description", "phrases__text"]
    inlines = [VerbPhraseInline]


@admin.register(LearnedPhrase)
class LearnedPhraseAdmin(EmbeddingStatusMixin, HistoryAdmin):
    list_display = [
        "phrase",
        "verb",
        "user_id",
        "confidence",
        "occurrence_count",
        "source",
        "is_active",
        "embedded",
        "embedding_model",
        "updated_at",
    ]
    list_filter = [
        "is_active",
        "source",
        "embedding_model",
        ("user_id", admin.EmptyFieldListFilter),
        ("private_agent", admin.EmptyFieldListFilter),
        "verb__domain",
    ]
    search_fields = ["phrase", "normalized", "verb__name", "user_id"]
    list_select_related = ["verb"]
    readonly_fields = ["normalized", "created_at", "updated_at", "last_matched_at", revert_link("phrase")]

    def has_add_permission(self, request):
        return False  # phrases are learned from candidates or imported, through services that embed them

    def get_readonly_fields(self, request, obj=None):
        """The text, verb and scope stay as learned: their normalized form and embedding are written by services."""
        return ["phrase", "verb", "user_id", "private_agent", *super().get_readonly_fields(request, obj)]


@admin.register(EntityAlias)
class EntityAliasAdmin(EmbeddingStatusMixin, TenantChoiceMixin, HistoryAdmin):
    list_display = ["alias", "canonical_name", "entity_type", "user_id", "confidence", "is_active", "embedded", "embedding_model"]
    list_filter = ["entity_type", "is_active", "source", ("user_id", admin.EmptyFieldListFilter)]
    search_fields = ["alias", "canonical_name", "user_id"]
    readonly_fields = ["normalized", "created_at", "updated_at"]


@admin.register(PhraseBlock)
class PhraseBlockAdmin(EmbeddingStatusMixin, HistoryAdmin):
    list_display = ["phrase", "verb", "user_id", "reason", "source", "expires_at", "embedded", "created_at"]
    list_filter = ["source", ("user_id", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter)]
    search_fields = ["phrase", "verb__name", "user_id", "reason"]
    list_select_related = ["verb"]
    autocomplete_fields = ["verb"]
    readonly_fields = ["normalized", "created_at", revert_link("block")]
