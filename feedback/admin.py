"""Admin screens of the feedback app."""

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------

from django.contrib import admin  # noqa: E402
from django.template.response import TemplateResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils.html import format_html_join  # noqa: E402

from feedback import selectors as feedback_selectors  # noqa: E402
from feedback.models import AbandonEvent, DisambiguationRequest, LearningSignal, PhraseEvidence  # noqa: E402


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
        "request_id", "agent", "channel", "user_id", "text", "normalized", "domain", "options_table", "status",
        "selected_verb", "selected_args", "created_at", "answered_at", "processed_at",
    ]
    exclude = ["options"]
    inlines = [AbandonEventInline, LearningSignalInline]
    change_list_template = "admin/feedback/disambiguationrequest/change_list.html"

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
            "", "<div>{}. <strong>{}</strong> — {} <small>({:.3f}, e.g. “{}”)</small></div>",
            ((i + 1, o["verb"], o.get("display_name", ""), o["score"], o.get("example", "")) for i, o in enumerate(obj.options)),
        )

    def get_urls(self):
        extra = [path("outcomes/", self.admin_site.admin_view(self.outcomes_view), name="feedback_disambiguation_outcomes")]
        return extra + super().get_urls()

    def outcomes_view(self, request):
        """Per verb offered: shares of its requests selected, abandoned, expired."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Disambiguation outcomes per verb",
            "opts": self.model._meta,
            "rows": feedback_selectors.disambiguation_outcomes_per_verb(),
        }
        return TemplateResponse(request, "admin/feedback/disambiguation_outcomes.html", context)


@admin.register(LearningSignal)
class LearningSignalAdmin(admin.ModelAdmin):
    list_display = ["phrase", "verb", "outcome", "is_negative", "confidence", "source", "user_id", "result", "created_at"]
    list_filter = ["outcome", "source", "is_negative", "result"]
    search_fields = ["normalized", "verb", "user_id"]
    readonly_fields = [f.name for f in LearningSignal._meta.fields]
    change_list_template = "admin/feedback/learningsignal/change_list.html"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_urls(self):
        extra = [path("per-phrase/", self.admin_site.admin_view(self.per_phrase_view), name="feedback_signals_per_phrase")]
        return extra + super().get_urls()

    def per_phrase_view(self, request):
        search = request.GET.get("q", "").strip()
        context = {
            **self.admin_site.each_context(request),
            "title": "Learning signals per phrase",
            "opts": self.model._meta,
            "search": search,
            "rows": feedback_selectors.signals_per_phrase(search=search),
        }
        return TemplateResponse(request, "admin/feedback/signals_per_phrase.html", context)


@admin.register(PhraseEvidence)
class PhraseEvidenceAdmin(admin.ModelAdmin):
    list_display = ["phrase", "verb", "user_id", "negative", "positive", "signal_count", "updated_at"]
    search_fields = ["normalized", "verb", "user_id"]
    list_filter = ["verb"]
    readonly_fields = ["user_id", "phrase", "normalized", "verb", "negative", "positive", "signal_count", "embedding_model", "created_at", "updated_at"]
    exclude = ["embedding", "embedding_hash"]

    def has_add_permission(self, request):
        return False


# --- out: proposal queue, execution review queue, feedback records, mistake patterns (issues 6-7) ---
# Every screen calls the same services as the API, so each change writes its
# feedback record in the same transaction whatever the path.

from django import forms as _out_forms  # noqa: E402
from django.contrib import messages as _out_messages  # noqa: E402
from django.urls import reverse as _out_reverse  # noqa: E402
from django.utils.html import format_html as _out_format_html  # noqa: E402

from autonomy.admin_helpers import JsonObjectField, pretty_json, run_bulk  # noqa: E402
from config.api import ApplicationError as _OutApplicationError  # noqa: E402
from feedback import services as _out_svc  # noqa: E402
from feedback.delta import delta_is_empty as _out_delta_empty  # noqa: E402
from feedback.delta import json_delta as _out_json_delta  # noqa: E402
from feedback.models import (  # noqa: E402
    Execution,
    FeedbackRecord,
    MistakePattern,
    PatternStatus,
    Proposal,
    ProposalStatus,
    ReviewOutcome,
)


class ProposalReviewForm(_out_forms.ModelForm):
    decision = _out_forms.ChoiceField(
        choices=[("", "— no decision —"), ("approve", "Approve"), ("reject", "Reject"), ("modify", "Modify the action")],
        required=False,
    )
    notes = _out_forms.CharField(widget=_out_forms.Textarea(attrs={"rows": 3, "cols": 80}), required=False, max_length=5000,
                                 help_text="Review notes; for a rejection or modification, say what was wrong.")
    new_action = JsonObjectField(required=False, label="Modified action", help_text="The corrected action as a JSON object.")
    category = _out_forms.CharField(required=False, max_length=60, label="Mistake category")

    class Meta:
        model = Proposal
        fields = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.fields["new_action"].initial = self.instance.proposed_action

    def clean(self):
        data = super().clean()
        decision = data.get("decision")
        if decision and self.instance.status != ProposalStatus.PENDING:
            raise _out_forms.ValidationError(f"This proposal is {self.instance.status}; only pending proposals can be reviewed.")
        if decision == "modify":
            new = data.get("new_action")
            if new is None:
                self.add_error("new_action", "Give the modified action.")
            elif _out_delta_empty(_out_json_delta(self.instance.proposed_action, new)):
                self.add_error("new_action", "The modified action is the same as the proposed one; approve instead.")
        return data


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    """The proposal queue: approve, reject with notes, or modify the action JSON."""

    form = ProposalReviewForm
    list_display = ["id", "agent", "action", "status", "confidence", "created_at", "reviewed_at"]
    list_filter = ["status", "agent", "action"]
    search_fields = ["action__name", "agent__name", "review_notes"]
    list_select_related = ["agent", "action"]
    date_hierarchy = "created_at"
    readonly_fields = ["agent", "action", "status", "confidence", "proposed_action_json", "reasoning_json",
                       "modified_action_json", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at",
                       "outcome_error", "completed_at", "created_at"]
    actions = ["approve_selected", "reject_selected"]

    def get_fieldsets(self, request, obj=None):
        info = ("Proposal", {"fields": ["agent", "action", "status", "confidence", "proposed_action_json", "reasoning_json",
                                        "created_at"]})
        done = ("Review", {"fields": ["modified_action_json", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at",
                                      "outcome_error", "completed_at"]})
        if obj is not None and obj.status == ProposalStatus.PENDING:
            return [info, ("Decision", {"fields": ["decision", "notes", "new_action", "category"]})]
        return [info, done]

    @admin.display(description="Proposed action")
    def proposed_action_json(self, obj):
        return pretty_json(obj.proposed_action)

    @admin.display(description="Reasoning")
    def reasoning_json(self, obj):
        return pretty_json(obj.reasoning)

    @admin.display(description="Modified action")
    def modified_action_json(self, obj):
        return pretty_json(obj.modified_action)

    def has_add_permission(self, request):
        return False  # agents propose through the API

    def has_delete_permission(self, request, obj=None):
        return False  # feedback records hang off proposals

    def save_model(self, request, obj, form, change):
        d = form.cleaned_data
        reviewer = _out_svc.Reviewer(user=request.user, source="admin")
        try:
            if d.get("decision") == "approve":
                _out_svc.proposal_approve(proposal=obj.pk, reviewer=reviewer, notes=d["notes"])
            elif d.get("decision") == "reject":
                _out_svc.proposal_reject(proposal=obj.pk, reviewer=reviewer, notes=d["notes"], mistake_category=d["category"])
            elif d.get("decision") == "modify":
                _out_svc.proposal_modify(proposal=obj.pk, reviewer=reviewer, modified_action=d["new_action"],
                                         notes=d["notes"], mistake_category=d["category"])
        except _OutApplicationError as exc:
            self.message_user(request, f"Not saved: {exc.message}", _out_messages.ERROR)

    def save_related(self, request, form, formsets, change):
        pass

    @admin.action(description="Approve selected pending proposals", permissions=["change"])
    def approve_selected(self, request, queryset):
        reviewer = _out_svc.Reviewer(user=request.user, source="admin_bulk")
        run_bulk(self, request, queryset, lambda p: _out_svc.proposal_approve(proposal=p.pk, reviewer=reviewer), "Approved")

    @admin.action(description="Reject selected pending proposals", permissions=["change"])
    def reject_selected(self, request, queryset):
        reviewer = _out_svc.Reviewer(user=request.user, source="admin_bulk")
        run_bulk(self, request, queryset, lambda p: _out_svc.proposal_reject(
            proposal=p.pk, reviewer=reviewer, notes=f"Rejected in bulk by {request.user}"), "Rejected")


class ExecutionReviewForm(_out_forms.ModelForm):
    outcome = _out_forms.ChoiceField(choices=[("", "— not reviewed —"), *ReviewOutcome.choices], required=False)
    notes = _out_forms.CharField(widget=_out_forms.Textarea(attrs={"rows": 3, "cols": 80}), required=False, max_length=5000)
    corrected = JsonObjectField(required=False, label="Corrected action", help_text="For an incorrect execution, what it should have been.")
    category = _out_forms.CharField(required=False, max_length=60, label="Mistake category")

    class Meta:
        model = Execution
        fields = []

    def clean(self):
        data = super().clean()
        if data.get("outcome") and self.instance.review_outcome:
            raise _out_forms.ValidationError(f"Already reviewed {self.instance.review_outcome}.")
        return data


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    """The execution review queue: correct or incorrect, with notes."""

    form = ExecutionReviewForm
    list_display = ["id", "agent", "action", "success", "confidence", "review_outcome", "created_at"]
    list_filter = [("review_outcome", admin.EmptyFieldListFilter), "review_outcome", "success", "agent", "action"]
    list_select_related = ["agent", "action"]
    search_fields = ["action__name", "agent__name"]
    readonly_fields = ["agent", "action", "confidence", "success", "params_json", "reasoning_json", "result_json", "error",
                       "duration_ms", "review_outcome", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at",
                       "created_at"]
    actions = ["mark_correct", "mark_incorrect"]

    def get_fieldsets(self, request, obj=None):
        info = ("Execution", {"fields": ["agent", "action", "confidence", "success", "params_json", "reasoning_json",
                                         "result_json", "error", "duration_ms", "created_at"]})
        if obj is not None and not obj.review_outcome:
            return [info, ("Review", {"fields": ["outcome", "notes", "corrected", "category"]})]
        return [info, ("Review", {"fields": ["review_outcome", "review_notes", "reviewed_by", "reviewed_by_key", "reviewed_at"]})]

    @admin.display(description="Params")
    def params_json(self, obj):
        return pretty_json(obj.params)

    @admin.display(description="Reasoning")
    def reasoning_json(self, obj):
        return pretty_json(obj.reasoning)

    @admin.display(description="Result")
    def result_json(self, obj):
        return pretty_json(obj.result)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        d = form.cleaned_data
        if not d.get("outcome"):
            return
        try:
            _out_svc.execution_review(execution=obj.pk, reviewer=_out_svc.Reviewer(user=request.user, source="admin"),
                                      outcome=d["outcome"], notes=d["notes"], corrected_action=d.get("corrected"),
                                      mistake_category=d["category"])
        except _OutApplicationError as exc:
            self.message_user(request, f"Not saved: {exc.message}", _out_messages.ERROR)

    def save_related(self, request, form, formsets, change):
        pass

    def _bulk(self, request, queryset, outcome):
        reviewer = _out_svc.Reviewer(user=request.user, source="admin_bulk")
        run_bulk(self, request, queryset, lambda e: _out_svc.execution_review(
            execution=e.pk, reviewer=reviewer, outcome=outcome, notes=f"Reviewed {outcome} in bulk by {request.user}"),
            f"Reviewed {outcome}")

    @admin.action(description="Review selected executions: correct", permissions=["change"])
    def mark_correct(self, request, queryset):
        self._bulk(request, queryset, ReviewOutcome.CORRECT)

    @admin.action(description="Review selected executions: incorrect", permissions=["change"])
    def mark_incorrect(self, request, queryset):
        self._bulk(request, queryset, ReviewOutcome.INCORRECT)


@admin.register(FeedbackRecord)
class FeedbackRecordAdmin(admin.ModelAdmin):
    """Feedback records by agent, action and type (read only: they are written by the services)."""

    list_display = ["id", "agent", "action", "feedback_type", "mistake_category", "agent_confidence", "pattern", "source",
                    "created_at"]
    list_filter = ["feedback_type", "agent", "action", "source", "processed"]
    list_select_related = ["agent", "action", "pattern"]
    search_fields = ["human_explanation", "mistake_category", "action__name", "agent__name"]
    date_hierarchy = "created_at"
    readonly_fields = ["agent", "action", "proposal", "execution", "feedback_type", "original_json", "corrected_json",
                       "delta_json", "human_explanation", "agent_confidence", "context_json", "mistake_category", "pattern",
                       "correction_rule", "processed", "processed_at", "created_by", "created_by_key", "source", "created_at"]
    fields = readonly_fields

    @admin.display(description="Original action")
    def original_json(self, obj):
        return pretty_json(obj.original_action)

    @admin.display(description="Corrected action")
    def corrected_json(self, obj):
        return pretty_json(obj.corrected_action)

    @admin.display(description="Correction delta")
    def delta_json(self, obj):
        return pretty_json(obj.correction_delta)

    @admin.display(description="Action context")
    def context_json(self, obj):
        return pretty_json(obj.action_context)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PatternReviewForm(_out_forms.ModelForm):
    class Meta:
        model = MistakePattern
        fields = ["status", "resolution_notes"]


@admin.register(MistakePattern)
class MistakePatternAdmin(admin.ModelAdmin):
    """Repeated mistakes; reviewers dismiss or resolve them with notes, or turn them into rules."""

    form = PatternReviewForm
    list_display = ["id", "agent", "action", "category", "occurrence_count", "status", "last_seen", "records_link"]
    list_filter = ["status", "agent", "action", "category"]
    list_select_related = ["agent", "action"]
    search_fields = ["description", "category", "action__name", "agent__name"]
    readonly_fields = ["agent", "action", "category", "description", "common_explanation", "correction_json",
                       "occurrence_count", "first_seen", "last_seen", "records_link", "resolved_by", "resolved_at",
                       "created_at", "updated_at"]
    fields = ["agent", "action", "category", "description", "common_explanation", "correction_json", "occurrence_count",
              "first_seen", "last_seen", "records_link", "status", "resolution_notes", "resolved_by", "resolved_at"]
    actions = ["dismiss_selected", "resolve_selected", "create_rules"]

    @admin.display(description="Most common correction")
    def correction_json(self, obj):
        return pretty_json(obj.common_correction)

    @admin.display(description="Contributing records")
    def records_link(self, obj):
        url = _out_reverse("admin:feedback_feedbackrecord_changelist") + f"?pattern__id__exact={obj.pk}"
        return _out_format_html('<a href="{}">{} record(s)</a>', url, obj.records.count())

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        if "status" in form.changed_data or "resolution_notes" in form.changed_data:
            _out_svc.mistake_pattern_set_status(pattern=obj.pk, status=form.cleaned_data["status"],
                                                notes=form.cleaned_data["resolution_notes"], user=request.user)

    @admin.action(description="Dismiss selected patterns", permissions=["change"])
    def dismiss_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda p: _out_svc.mistake_pattern_set_status(
            pattern=p.pk, status=PatternStatus.DISMISSED, notes=f"Dismissed in bulk by {request.user}", user=request.user),
            "Dismissed")

    @admin.action(description="Resolve selected patterns", permissions=["change"])
    def resolve_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda p: _out_svc.mistake_pattern_set_status(
            pattern=p.pk, status=PatternStatus.RESOLVED, notes=f"Resolved in bulk by {request.user}", user=request.user),
            "Resolved")

    @admin.action(description="Create correction rules from selected active patterns", permissions=["change"])
    def create_rules(self, request, queryset):
        from autonomy.services import correction_rules_create

        rules = correction_rules_create(pattern_ids=list(queryset.values_list("pk", flat=True)), user=request.user)
        self.message_user(request, f"Created {len(rules)} correction rule(s) (only active patterns without one get a rule).")


# --- Disambiguation feedback loop (issue 4, dis): fitted resolution profiles ---------------

from django.contrib import messages  # noqa: E402
from django.http import HttpResponseNotAllowed, HttpResponseRedirect  # noqa: E402
from django.urls import reverse  # noqa: E402

from config.api import ApplicationError as _ApplicationError  # noqa: E402
from feedback.models import FittedResolutionProfile  # noqa: E402


@admin.register(FittedResolutionProfile)
class FittedResolutionProfileAdmin(admin.ModelAdmin):
    """Fitted thresholds with their measured effect on held-out gold labels; a reviewer activates one to put it live."""

    list_display = [
        "created_at", "embedding_model", "status", "resolve_threshold", "margin", "baseline_values", "gold_count",
        "held_out_count", "held_out_now", "held_out_after",
    ]
    list_filter = ["status", "embedding_model"]
    readonly_fields = [f.name for f in FittedResolutionProfile._meta.fields]
    actions = ["activate", "retire"]
    change_list_template = "admin/feedback/fittedresolutionprofile/change_list.html"

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
        from feedback.services import resolution_profile_activate

        if queryset.count() != 1:
            self.message_user(request, "Select exactly one profile to activate.", messages.ERROR)
            return
        row = resolution_profile_activate(fitted=queryset.get(), reviewer=request.user)
        self.message_user(request, f"Live: {row}.", messages.SUCCESS)

    @admin.action(description="Retire the selected profiles", permissions=["change"])
    def retire(self, request, queryset):
        from feedback.services import resolution_profile_retire

        for row in queryset:
            resolution_profile_retire(fitted=row)
        self.message_user(request, f"Retired {queryset.count()} profile(s).", messages.SUCCESS)

    def get_urls(self):
        extra = [path("fit/", self.admin_site.admin_view(self.fit_view), name="feedback_fittedresolutionprofile_fit")]
        return extra + super().get_urls()

    def fit_view(self, request):
        from feedback.services import resolution_profile_fit

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
        return HttpResponseRedirect(reverse("admin:feedback_fittedresolutionprofile_changelist"))
