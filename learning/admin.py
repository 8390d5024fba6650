"""Admin screens of the learning app: catalogue, learned phrases, aliases, blocks, candidate review,
disambiguation requests, signals, evidence and fitted profiles."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html_join
from simple_history.admin import SimpleHistoryAdmin

from common.api import ApplicationError
from common.api import ApplicationError as _ApplicationError
from embeddings.admin import EmbeddingStatusMixin
from learning import selectors as _selectors
from learning.models import (
    AbandonEvent,
    DecisionFit,
    DecisionFitEvent,
    DisambiguationRequest,
    EntityAlias,
    FittedResolutionProfile,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
    ResolutionRecord,
    Verb,
    VerbPhrase,
)
from learning.services.candidates import candidate_approve, candidate_reject
from learning.services.decisions import decision_fit_pin, decision_fit_retire_live, decision_fit_unpin
from learning.services.profiles import resolution_profile_activate, resolution_profile_fit, resolution_profile_retire


class VerbPhraseInline(EmbeddingStatusMixin, admin.TabularInline):
    model = VerbPhrase
    extra = 0
    fields = ["text", "normalized", "embedding_model", "embedded"]
    readonly_fields = ["normalized"]


@admin.register(Verb)
class VerbAdmin(SimpleHistoryAdmin):
    list_display = ["name", "domain", "display_name", "is_active", "updated_at"]
    list_filter = ["domain", "is_active"]
    search_fields = ["name", "display_name", "description", "phrases__text"]
    inlines = [VerbPhraseInline]


@admin.register(LearnedPhrase)
class LearnedPhraseAdmin(EmbeddingStatusMixin, SimpleHistoryAdmin):
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
    list_filter = ["is_active", "source", "embedding_model", ("user_id", admin.EmptyFieldListFilter), "verb__domain"]
    search_fields = ["phrase", "normalized", "verb__name", "user_id"]
    list_select_related = ["verb"]
    autocomplete_fields = ["verb"]
    readonly_fields = ["normalized", "created_at", "updated_at", "last_matched_at"]


@admin.register(EntityAlias)
class EntityAliasAdmin(EmbeddingStatusMixin, SimpleHistoryAdmin):
    list_display = ["alias", "canonical_name", "entity_type", "user_id", "confidence", "is_active", "embedded", "embedding_model"]
    list_filter = ["entity_type", "is_active", "source", ("user_id", admin.EmptyFieldListFilter)]
    search_fields = ["alias", "canonical_name", "user_id"]
    readonly_fields = ["normalized", "created_at", "updated_at"]


@admin.register(PhraseBlock)
class PhraseBlockAdmin(EmbeddingStatusMixin, SimpleHistoryAdmin):
    list_display = ["phrase", "verb", "user_id", "reason", "source", "expires_at", "embedded", "created_at"]
    list_filter = ["source", ("user_id", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter)]
    search_fields = ["phrase", "verb__name", "user_id", "reason"]
    list_select_related = ["verb"]
    autocomplete_fields = ["verb"]
    readonly_fields = ["normalized", "created_at"]


# --- Learning governance: candidate review ---


REVIEW_PERMISSION = "learning.review_learningcandidate"


class MinOccurrencesFilter(admin.SimpleListFilter):
    title = "minimum occurrences"
    parameter_name = "min_occurrences"

    def lookups(self, request, model_admin):
        return [(str(n), f"≥ {n}") for n in (2, 3, 5, 10, 25)]

    def queryset(self, request, queryset):
        if self.value() and self.value().isdigit():
            return queryset.filter(occurrence_count__gte=int(self.value()))
        return queryset


def candidate_change_preview(candidate: LearningCandidate) -> str:
    """What approving the candidate would change, in one line."""
    scope = f"user {candidate.user_id}" if candidate.user_id else "global"
    if candidate.status not in (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED):
        return f"skipped: already {candidate.status}"
    if candidate.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        current = EntityAlias.objects.filter(
            normalized=candidate.normalized, entity_type="entity", user_id=candidate.user_id
        ).first()
        if current:
            return f"alias “{candidate.input_pattern}” ({scope}) re-pointed from {current.canonical_name} to {candidate.suggested_output}"
        return f"new alias “{candidate.input_pattern}” → {candidate.suggested_output} ({scope})"
    current = (
        LearnedPhrase.objects.filter(normalized=candidate.normalized, user_id=candidate.user_id).select_related("verb").first()
    )
    if current and current.verb.name != candidate.suggested_output:
        return f"learned phrase “{candidate.input_pattern}” ({scope}) re-pointed from {current.verb.name} to {candidate.suggested_output}"
    if current:
        return f"learned phrase “{candidate.input_pattern}” → {candidate.suggested_output} ({scope}) confirmed"
    return f"new learned phrase “{candidate.input_pattern}” → {candidate.suggested_output} ({scope}), with its embedding"


@admin.register(LearningCandidate)
class LearningCandidateAdmin(SimpleHistoryAdmin):
    list_display = [
        "input_pattern",
        "suggested_output",
        "candidate_type",
        "status",
        "occurrence_count",
        "confidence_pct",
        "risk_level",
        "user_id",
        "source",
        "last_seen_at",
        "reviewed_by",
        "reviewed_by_agent",
        "reviewed_at",
    ]
    list_filter = [
        "status",
        "candidate_type",
        "risk_level",
        MinOccurrencesFilter,
        "source",
        ("user_id", admin.EmptyFieldListFilter),
    ]
    search_fields = ["input_pattern", "normalized", "suggested_output", "previous_output", "explanation", "user_id"]
    ordering = [_selectors.pending_first().asc(), "-occurrence_count", "-last_seen_at"]
    list_select_related = ["reviewed_by", "reviewed_by_agent"]
    actions = ["approve_selected", "reject_selected"]
    readonly_fields = [
        "candidate_type",
        "input_pattern",
        "normalized",
        "suggested_output",
        "previous_output",
        "occurrence_count",
        "confidence",
        "source",
        "risk_level",
        "rejected_alternatives",
        "user_id",
        "status",
        "explanation",
        "review_reason",
        "reviewed_by",
        "reviewed_by_agent",
        "reviewed_at",
        "created_at",
        "updated_at",
        "last_seen_at",
    ]

    @admin.display(description="confidence", ordering="confidence")
    def confidence_pct(self, obj):
        return f"{obj.confidence:.0%}"

    def has_add_permission(self, request):
        return False  # candidates come from feedback and corrections, not from hand entry

    def has_review_permission(self, request):
        return request.user.has_perm(REVIEW_PERMISSION)

    def _confirmation(self, request, queryset, *, action, title, template, extra=None):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "queryset": queryset,
            "rows": [(c, candidate_change_preview(c) if action == "approve_selected" else _reject_preview(c)) for c in queryset],
            "action_name": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
            **(extra or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, f"admin/learning/learningcandidate/{template}", context)

    @admin.action(description="Approve and apply selected candidates", permissions=["review"])
    def approve_selected(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(
                request,
                queryset,
                action="approve_selected",
                title="Approve and apply candidates",
                template="approve_confirmation.html",
            )
        done, failed = 0, []
        for candidate in queryset:
            try:
                candidate_approve(candidate=candidate, reviewer=request.user, apply_immediately=True)
                done += 1
            except ApplicationError as exc:
                failed.append(f"#{candidate.pk} {candidate.input_pattern}: {exc.message}")
        if done:
            self.message_user(request, f"Approved and applied {done} candidate(s).", messages.SUCCESS)
        for line in failed:
            self.message_user(request, f"Not approved: {line}", messages.ERROR)
        return None

    @admin.action(description="Reject selected candidates", permissions=["review"])
    def reject_selected(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(
                request,
                queryset,
                action="reject_selected",
                title="Reject candidates",
                template="reject_confirmation.html",
            )
        reason = request.POST.get("reason", "").strip()
        add_to_blocklist = request.POST.get("add_to_blocklist") == "on"
        if not reason:
            self.message_user(request, "Give a reason for the rejection.", messages.ERROR)
            return self._confirmation(
                request,
                queryset,
                action="reject_selected",
                title="Reject candidates",
                template="reject_confirmation.html",
                extra={"reason_error": "A reason is required.", "add_to_blocklist": add_to_blocklist},
            )
        done, failed = 0, []
        for candidate in queryset:
            try:
                block = add_to_blocklist and candidate.candidate_type == LearningCandidate.Type.INVOCATION_PHRASE
                candidate_reject(candidate=candidate, reviewer=request.user, reason=reason, add_to_blocklist=block)
                done += 1
            except ApplicationError as exc:
                failed.append(f"#{candidate.pk} {candidate.input_pattern}: {exc.message}")
        if done:
            suffix = " and blocklisted their phrases" if add_to_blocklist else ""
            self.message_user(request, f"Rejected {done} candidate(s){suffix}.", messages.SUCCESS)
        for line in failed:
            self.message_user(request, f"Not rejected: {line}", messages.ERROR)
        return None


def _reject_preview(candidate: LearningCandidate) -> str:
    if candidate.status not in (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED):
        return f"skipped: already {candidate.status}"
    scope = f"user {candidate.user_id}" if candidate.user_id else "global"
    if candidate.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        return f"rejected (aliases are not blocklisted) ({scope})"
    return f"rejected; with “add to blocklist”: {candidate.suggested_output} blocked for “{candidate.input_pattern}” and paraphrases ({scope})"


class LearningSignalInline(admin.TabularInline):
    model = LearningSignal
    extra = 0
    can_delete = False
    fields = ["phrase", "verb", "outcome", "is_negative", "confidence", "result", "candidate_id", "processed_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


class AbandonEventInline(admin.StackedInline):
    model = AbandonEvent
    extra = 0
    can_delete = False
    readonly_fields = ["reason", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(DisambiguationRequest)
class DisambiguationRequestAdmin(admin.ModelAdmin):
    list_display = ["text", "user_id", "channel", "shown_options", "status", "selected_verb", "created_at"]
    list_filter = ["status", "channel", "domain", "created_at"]
    search_fields = ["text", "user_id", "request_id", "selected_verb"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "request_id",
        "agent",
        "channel",
        "user_id",
        "text",
        "normalized",
        "domain",
        "options_table",
        "status",
        "selected_verb",
        "selected_args",
        "created_at",
        "answered_at",
        "processed_at",
    ]
    exclude = ["options"]
    inlines = [AbandonEventInline, LearningSignalInline]
    change_list_template = "admin/learning/disambiguationrequest/change_list.html"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="options")
    def shown_options(self, obj):
        return ", ".join(f"{o['verb']} ({o['score']:.2f})" for o in obj.options)

    @admin.display(description="options shown")
    def options_table(self, obj):
        return format_html_join(
            "",
            "<div>{}. <strong>{}</strong> — {} <small>({:.3f}, e.g. “{}”)</small></div>",
            ((i + 1, o["verb"], o.get("display_name", ""), o["score"], o.get("example", "")) for i, o in enumerate(obj.options)),
        )

    def get_urls(self):
        extra = [path("outcomes/", self.admin_site.admin_view(self.outcomes_view), name="learning_disambiguation_outcomes")]
        return extra + super().get_urls()

    def outcomes_view(self, request):
        """Per verb offered: shares of its requests selected, abandoned, expired."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Disambiguation outcomes per verb",
            "opts": self.model._meta,
            "rows": _selectors.disambiguation_outcomes_per_verb(),
        }
        return TemplateResponse(request, "admin/learning/disambiguation_outcomes.html", context)


@admin.register(LearningSignal)
class LearningSignalAdmin(admin.ModelAdmin):
    list_display = ["phrase", "verb", "outcome", "is_negative", "confidence", "source", "user_id", "result", "created_at"]
    list_filter = ["outcome", "source", "is_negative", "result"]
    search_fields = ["normalized", "verb", "user_id"]
    readonly_fields = [f.name for f in LearningSignal._meta.fields]
    change_list_template = "admin/learning/learningsignal/change_list.html"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_urls(self):
        extra = [path("per-phrase/", self.admin_site.admin_view(self.per_phrase_view), name="learning_signals_per_phrase")]
        return extra + super().get_urls()

    def per_phrase_view(self, request):
        search = request.GET.get("q", "").strip()
        context = {
            **self.admin_site.each_context(request),
            "title": "Learning signals per phrase",
            "opts": self.model._meta,
            "search": search,
            "rows": _selectors.signals_per_phrase(search=search),
        }
        return TemplateResponse(request, "admin/learning/signals_per_phrase.html", context)


@admin.register(PhraseEvidence)
class PhraseEvidenceAdmin(admin.ModelAdmin):
    list_display = ["phrase", "verb", "user_id", "negative", "positive", "signal_count", "updated_at"]
    search_fields = ["normalized", "verb", "user_id"]
    list_filter = ["verb"]
    readonly_fields = [
        "user_id",
        "phrase",
        "normalized",
        "verb",
        "negative",
        "positive",
        "signal_count",
        "embedding_model",
        "created_at",
        "updated_at",
    ]
    exclude = ["embedding", "embedding_hash"]

    def has_add_permission(self, request):
        return False


@admin.register(FittedResolutionProfile)
class FittedResolutionProfileAdmin(admin.ModelAdmin):
    """Fitted thresholds with their measured effect on held-out gold labels; a reviewer activates one to put it live."""

    list_display = [
        "created_at",
        "embedding_model",
        "status",
        "resolve_threshold",
        "margin",
        "baseline_values",
        "gold_count",
        "held_out_count",
        "held_out_now",
        "held_out_after",
    ]
    list_filter = ["status", "embedding_model"]
    readonly_fields = [f.name for f in FittedResolutionProfile._meta.fields]
    actions = ["activate", "retire"]
    change_list_template = "admin/learning/fittedresolutionprofile/change_list.html"

    def has_add_permission(self, request):
        return False

    @admin.display(description="in force when fitted")
    def baseline_values(self, obj):
        return f"threshold {obj.baseline.get('resolve_threshold')}, margin {obj.baseline.get('margin')}"

    @staticmethod
    def _figures(f: dict) -> str:
        return f"{f.get('correct')}% right · {f.get('wrong')}% wrong · {f.get('asked')}% asked" if f else "—"

    @admin.display(description="held-out, profile in force")
    def held_out_now(self, obj):
        return self._figures(obj.held_out_current)

    @admin.display(description="held-out, fitted")
    def held_out_after(self, obj):
        return self._figures(obj.held_out_fitted)

    @admin.action(description="Activate the selected profile (put it live)", permissions=["change"])
    def activate(self, request, queryset):

        if queryset.count() != 1:
            self.message_user(request, "Select exactly one profile to activate.", messages.ERROR)
            return
        row = resolution_profile_activate(fitted=queryset.get(), reviewer=request.user)
        self.message_user(request, f"Live: {row}.", messages.SUCCESS)

    @admin.action(description="Retire the selected profiles", permissions=["change"])
    def retire(self, request, queryset):

        for row in queryset:
            resolution_profile_retire(fitted=row)
        self.message_user(request, f"Retired {queryset.count()} profile(s).", messages.SUCCESS)

    def get_urls(self):
        extra = [path("fit/", self.admin_site.admin_view(self.fit_view), name="learning_fittedresolutionprofile_fit")]
        return extra + super().get_urls()

    def fit_view(self, request):

        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        try:
            row = resolution_profile_fit()
            self.message_user(request, f"Proposed: {row}. Compare the held-out figures, then activate it.", messages.SUCCESS)
        except _ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        return HttpResponseRedirect(reverse("admin:learning_fittedresolutionprofile_changelist"))


# --- The learned auto-resolve decision ---


class DecisionFitEventInline(admin.TabularInline):
    model = DecisionFitEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "action", "previous_version", "reason", "by"]
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(DecisionFit)
class DecisionFitAdmin(admin.ModelAdmin):
    """Versioned decision fits: held-out figures of each fit and of the fit in use; pin (put live and hold),
    unpin, roll back to the catalogue prior. Every switch is listed in its history (events)."""

    list_display = [
        "version",
        "source",
        "status",
        "pinned",
        "n_labels",
        "held_out",
        "held_out_in_use",
        "shadow_figures",
        "created_at",
    ]
    list_filter = ["status", "source", "pinned"]
    readonly_fields = [f.name for f in DecisionFit._meta.fields]
    inlines = [DecisionFitEventInline]
    actions = ["pin_selected", "unpin_selected", "roll_back_to_prior"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def _confirm(self, request, queryset, *, action, title, intro):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "intro": intro,
            "opts": self.model._meta,
            "queryset": queryset,
            "live": DecisionFit.objects.filter(status=DecisionFit.Status.LIVE).first(),
            "action_name": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/learning/decisionfit/confirm.html", context)

    @admin.action(description="Pin: put the selected fit live and hold it there", permissions=["change"])
    def pin_selected(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one fit to pin.", messages.ERROR)
            return None
        if request.POST.get("post") != "yes":
            return self._confirm(
                request,
                queryset,
                action="pin_selected",
                title="Pin this decision fit?",
                intro="It goes live at once and stays live: automatic promotion stops until it is unpinned.",
            )
        try:
            row = decision_fit_pin(fit=queryset.get(), reviewer=request.user)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        self.message_user(request, f"Live and pinned: {row}.", messages.SUCCESS)
        return None

    @admin.action(description="Unpin the selected fits (automatic promotion resumes)", permissions=["change"])
    def unpin_selected(self, request, queryset):
        for row in queryset:
            decision_fit_unpin(fit=row, reviewer=request.user)
        self.message_user(request, f"Unpinned {queryset.count()} fit(s).", messages.SUCCESS)

    @admin.action(description="Roll back to the catalogue prior (pinned)", permissions=["change"])
    def roll_back_to_prior(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirm(
                request,
                queryset,
                action="roll_back_to_prior",
                title="Roll back to the catalogue prior?",
                intro="The newest catalogue prior goes live and is pinned; the live fit is retired.",
            )
        try:
            row = decision_fit_retire_live(reviewer=request.user)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        self.message_user(request, f"Live and pinned: {row}.", messages.SUCCESS)
        return None


@admin.register(ResolutionRecord)
class ResolutionRecordAdmin(admin.ModelAdmin):
    """Every resolution with its explanation and, once the user answered, its label."""

    list_display = [
        "created_at",
        "user_id",
        "text",
        "outcome",
        "verb",
        "rule",
        "probability",
        "cut",
        "fit_version",
        "label",
        "label_source",
    ]
    list_filter = ["outcome", "rule", "label", "label_source"]
    search_fields = ["normalized", "user_id", "verb"]
    readonly_fields = [f.name for f in ResolutionRecord._meta.fields]

    def has_add_permission(self, request):
        return False
