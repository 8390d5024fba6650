"""Admin screens of the verb catalogue, learned phrases, entity aliases and the blocklist. What a reviewer types
(a verb's phrases, an alias) is normalized and embedded by the catalogue's services, as a load or a candidate is."""

import re

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from common.admin import (
    HistoryAdmin,
    LogWithoutTexts,
    TopValuesFilter,
    fields_changed,
    revert_link,
    unchanged_read_again,
)
from common.text import normalize_phrase
from embeddings.admin import EmbeddingStatusMixin
from learning.models import (
    DOMAIN_RE,
    EntityAlias,
    LearnedPhrase,
    PhraseBlock,
    Verb,
    VerbPhrase,
)
from learning.services.catalogue import entity_alias_save, verb_edit, verb_phrases_edit
from tenants.admin import TenantChoiceMixin


class _NormalizedForm(forms.ModelForm):
    """Computes the row's normalized text from ``text_field`` before validation, so a text with nothing to match is
    an error on the page and so is one the unique constraints (which hold the normalized text) refuse."""

    text_field = ""

    def _post_clean(self):
        text = self.cleaned_data.get(self.text_field)
        if text is not None:
            self.instance.normalized = self.cleaned_data["normalized"] = normalize_phrase(text)  # for the formset's checks
            longest = self._meta.model._meta.get_field("normalized").max_length
            if not self.instance.normalized:
                self.add_error(self.text_field, "This has no words to match.")
            elif len(self.instance.normalized) > longest:  # a ligature or a unit sign spelled out grows
                self.add_error(
                    self.text_field,
                    f"This is {len(self.instance.normalized)} characters once normalised; at most {longest} fit.",
                )
        super()._post_clean()

    def _get_validation_exclusions(self):
        exclude = super()._get_validation_exclusions()
        if self.instance.normalized and self.text_field not in self.errors:  # else the text field's error says why
            exclude.discard("normalized")
        return exclude


class VerbPhraseForm(_NormalizedForm):
    text_field = "text"


class VerbPhraseFormSet(forms.BaseInlineFormSet):
    def clean(self):
        seen = {}
        for form in self.forms:
            if not hasattr(form, "cleaned_data") or form.cleaned_data.get("DELETE") or not form.cleaned_data.get("text"):
                continue
            norm = form.cleaned_data["normalized"]  # the form's own clean computed it
            if norm in seen:
                raise ValidationError(f"{form.cleaned_data['text']!r} and {seen[norm]!r} are the same phrase.")
            seen[norm] = form.cleaned_data["text"]
        super().clean()


class VerbPhraseInline(EmbeddingStatusMixin, admin.TabularInline):
    model = VerbPhrase
    form = VerbPhraseForm
    formset = VerbPhraseFormSet
    extra = 0
    fields = ["text", "normalized", "embedding_model", "embedded"]
    readonly_fields = ["normalized"]


def _edited(obj, form, change) -> list[str] | None:
    """The fields an edit saves (None: a new row, saved whole), the others read again for its history row."""
    if not change:
        return None
    fields = fields_changed(obj, form)
    if fields:
        unchanged_read_again(obj, fields)
    return fields


class _VerbSave:
    def save_model(self, request, obj, form, change):
        verb_edit(verb=obj, fields=_edited(obj, form, change))

    def save_formset(self, request, form, formset, change):  # only shown to those who may change phrases
        phrases = formset.save(commit=False)
        verb_phrases_edit(verb=form.instance, phrases=phrases, deleted=formset.deleted_objects)


class VerbForm(forms.ModelForm):
    def clean_domain(self):
        """The domain a catalogue file and resolve's ``domain`` can name: a lowercase identifier, as a load requires."""
        domain = self.cleaned_data["domain"].strip()
        if not re.fullmatch(DOMAIN_RE, domain):
            raise ValidationError("Use a lowercase identifier such as cbu or wire_transfers.")
        return domain


@admin.register(Verb)
class VerbAdmin(TenantChoiceMixin, _VerbSave, HistoryAdmin):
    form = VerbForm
    list_display = ["name", "domain", "display_name", "is_active", "updated_at"]
    list_filter = ["domain", "is_active"]
    search_fields = ["name", "display_name", "description", "phrases__text"]
    inlines = [VerbPhraseInline]

    def has_delete_permission(self, request, obj=None):
        """A verb ends by retirement (``is_active`` off), never by deletion: deleting it would delete every phrase
        and block learned for it, which a reload of the catalogue would not bring back."""
        return False

    def get_readonly_fields(self, request, obj=None):
        """A verb's name is what candidates, evidence, signals and records name it by: fixed once it exists."""
        fields = list(super().get_readonly_fields(request, obj))
        return fields if obj is None else ["name", *fields]


@admin.register(LearnedPhrase)
class LearnedPhraseAdmin(LogWithoutTexts, EmbeddingStatusMixin, HistoryAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
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
        ("source", TopValuesFilter),
        ("embedding_model", TopValuesFilter),
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
        """The phrase stays as learned: its text, scope, origin and state are written by services (its normalized form
        and embedding follow the text; ``source`` decides what counts as a gold label). It is ended with "revert",
        which records why."""
        learned = ["phrase", "verb", "user_id", "private_agent", "agent", "source", "is_active", "confidence", "occurrence_count"]
        return [*learned, *super().get_readonly_fields(request, obj)]


class EntityAliasForm(_NormalizedForm):
    text_field = "alias"


class _AliasSave:
    def save_model(self, request, obj, form, change):
        entity_alias_save(alias=obj, fields=_edited(obj, form, change))


@admin.register(EntityAlias)
class EntityAliasAdmin(LogWithoutTexts, EmbeddingStatusMixin, TenantChoiceMixin, _AliasSave, HistoryAdmin):
    form = EntityAliasForm
    list_display = ["alias", "canonical_name", "entity_type", "user_id", "confidence", "is_active", "embedded", "embedding_model"]
    list_filter = ["entity_type", "is_active", "source", ("user_id", admin.EmptyFieldListFilter)]
    search_fields = ["alias", "canonical_name", "user_id"]
    readonly_fields = ["normalized", "created_at", "updated_at"]


@admin.register(PhraseBlock)
class PhraseBlockAdmin(LogWithoutTexts, EmbeddingStatusMixin, HistoryAdmin):
    list_display = ["phrase", "verb", "user_id", "reason", "source", "expires_at", "embedded", "embedding_model", "created_at"]
    list_filter = ["source", ("user_id", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter)]
    search_fields = ["phrase", "verb__name", "user_id", "reason"]
    list_select_related = ["verb"]
    autocomplete_fields = ["verb"]
    readonly_fields = ["normalized", "created_at", revert_link("block")]

    def has_add_permission(self, request):
        return False  # blocks are added through the API, MCP or a rejection, by a service that normalizes and embeds

    def get_readonly_fields(self, request, obj=None):
        """What is blocked, and until when, stays as added (its normalized form and vector follow it); "revert" ends a
        block and records why. Only the reason may change."""
        return ["phrase", "verb", "user_id", "expires_at", "source", *super().get_readonly_fields(request, obj)]
