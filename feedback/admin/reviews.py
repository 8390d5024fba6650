"""Admin queues of proposals and executions, and feedback records. Every screen calls the same services as the API."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from common.admin import BoundedRelatedFilter, JsonObjectField, TopValuesFilter, pretty_json, rounded, run_bulk
from common.api import ApplicationError
from feedback.delta import delta_is_empty, json_delta
from feedback.models import (
    Execution,
    FeedbackRecord,
    Proposal,
    ProposalStatus,
    ReviewOutcome,
)
from feedback.selectors import mistake_categories_in_use
from feedback.services.reviews import Reviewer, execution_review, proposal_approve, proposal_modify, proposal_reject

"""Admin screens of the feedback app: proposal and execution review queues, feedback records, mistake
patterns and correction rules. Every screen calls the same services as the API."""


# Every screen calls the same services as the API, so each change writes its
# feedback record in the same transaction whatever the path.


class ProposalReviewForm(forms.ModelForm):
    decision = forms.ChoiceField(
        choices=[("", "— no decision —"), ("approve", "Approve"), ("reject", "Reject"), ("modify", "Modify the action")],
        required=False,
    )
    notes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        required=False,
        max_length=5000,
        help_text="Review notes; for a rejection or modification, say what was wrong.",
    )
    new_action = JsonObjectField(required=False, label="Modified action", help_text="The corrected action as a JSON object.")
    category = forms.CharField(required=False, max_length=60, label="Mistake category")

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
            raise forms.ValidationError(f"This proposal is {self.instance.status}; only pending proposals can be reviewed.")
        if decision == "modify":
            new = data.get("new_action")
            if new is None:
                self.add_error("new_action", "Give the modified action.")
            elif delta_is_empty(json_delta(self.instance.proposed_action, new)):
                self.add_error("new_action", "The modified action is the same as the proposed one; approve instead.")
        return data


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    """The proposal queue: approve, reject with notes, or modify the action JSON."""

    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    form = ProposalReviewForm
    list_display = ["id", "agent", "action", "status", rounded("confidence"), "created_at", "reviewed_at"]
    list_filter = ["status", ("agent", BoundedRelatedFilter), ("action", BoundedRelatedFilter)]
    search_fields = ["action__name", "agent__name", "review_notes"]
    list_select_related = ["agent", "action"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "agent",
        "action",
        "status",
        "confidence",
        "proposed_action_json",
        "reasoning_json",
        "modified_action_json",
        "review_notes",
        "reviewed_by",
        "reviewed_by_key",
        "reviewed_at",
        "outcome_error",
        "completed_at",
        "created_at",
    ]
    actions = ["approve_selected", "reject_selected"]

    def get_fieldsets(self, request, obj=None):
        info = (
            "Proposal",
            {"fields": ["agent", "action", "status", "confidence", "proposed_action_json", "reasoning_json", "created_at"]},
        )
        done = (
            "Review",
            {
                "fields": [
                    "modified_action_json",
                    "review_notes",
                    "reviewed_by",
                    "reviewed_by_key",
                    "reviewed_at",
                    "outcome_error",
                    "completed_at",
                ]
            },
        )
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
        reviewer = Reviewer(user=request.user, source="admin")
        try:
            if d.get("decision") == "approve":
                proposal_approve(proposal=obj.pk, reviewer=reviewer, notes=d["notes"])
            elif d.get("decision") == "reject":
                proposal_reject(proposal=obj.pk, reviewer=reviewer, notes=d["notes"], mistake_category=d["category"])
            elif d.get("decision") == "modify":
                proposal_modify(
                    proposal=obj.pk,
                    reviewer=reviewer,
                    modified_action=d["new_action"],
                    notes=d["notes"],
                    mistake_category=d["category"],
                )
        except ApplicationError as exc:
            self.message_user(request, f"Not saved: {exc.message}", messages.ERROR)

    def save_related(self, request, form, formsets, change):
        pass

    @admin.action(description="Approve selected pending proposals", permissions=["change"])
    def approve_selected(self, request, queryset):
        reviewer = Reviewer(user=request.user, source="admin_bulk")
        run_bulk(self, request, queryset, lambda p: proposal_approve(proposal=p.pk, reviewer=reviewer), "Approved")

    @admin.action(description="Reject selected pending proposals", permissions=["change"])
    def reject_selected(self, request, queryset):
        reviewer = Reviewer(user=request.user, source="admin_bulk")
        return bulk_rejection(
            self,
            request,
            queryset,
            change="rejected",
            apply=lambda p, category, notes: proposal_reject(
                proposal=p.pk, reviewer=reviewer, notes=notes, mistake_category=category
            ),
            done="Rejected",
        )


class ExecutionReviewForm(forms.ModelForm):
    outcome = forms.ChoiceField(choices=[("", "— not reviewed —"), *ReviewOutcome.choices], required=False)
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), required=False, max_length=5000)
    corrected = JsonObjectField(
        required=False, label="Corrected action", help_text="For an incorrect execution, what it should have been."
    )
    category = forms.CharField(required=False, max_length=60, label="Mistake category")

    class Meta:
        model = Execution
        fields = []

    def clean(self):
        data = super().clean()
        if data.get("outcome") and self.instance.review_outcome:
            raise forms.ValidationError(f"Already reviewed {self.instance.review_outcome}.")
        return data


class ReviewStateFilter(admin.SimpleListFilter):
    """One filter for the review state (unreviewed, correct, incorrect), not two with the same title."""

    title = "review outcome"
    parameter_name = "review"

    def lookups(self, request, model_admin):
        return [("unreviewed", "unreviewed"), ("correct", "correct"), ("incorrect", "incorrect")]

    def queryset(self, request, queryset):
        if self.value() == "unreviewed":
            return queryset.filter(review_outcome__isnull=True)
        if self.value() in ("correct", "incorrect"):
            return queryset.filter(review_outcome=self.value())
        return queryset


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    """The execution review queue: correct or incorrect, with notes."""

    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    form = ExecutionReviewForm
    list_display = ["id", "agent", "action", "success", rounded("confidence"), "review_outcome", "created_at"]
    list_filter = [ReviewStateFilter, "success", ("agent", BoundedRelatedFilter), ("action", BoundedRelatedFilter)]
    list_select_related = ["agent", "action"]
    search_fields = ["action__name", "agent__name"]
    readonly_fields = [
        "agent",
        "action",
        "confidence",
        "success",
        "params_json",
        "reasoning_json",
        "result_json",
        "error",
        "duration_ms",
        "review_outcome",
        "review_notes",
        "reviewed_by",
        "reviewed_by_key",
        "reviewed_at",
        "created_at",
    ]
    actions = ["mark_correct", "mark_incorrect"]

    def get_fieldsets(self, request, obj=None):
        info = (
            "Execution",
            {
                "fields": [
                    "agent",
                    "action",
                    "confidence",
                    "success",
                    "params_json",
                    "reasoning_json",
                    "result_json",
                    "error",
                    "duration_ms",
                    "created_at",
                ]
            },
        )
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
            execution_review(
                execution=obj.pk,
                reviewer=Reviewer(user=request.user, source="admin"),
                outcome=d["outcome"],
                notes=d["notes"],
                corrected_action=d.get("corrected"),
                mistake_category=d["category"],
            )
        except ApplicationError as exc:
            self.message_user(request, f"Not saved: {exc.message}", messages.ERROR)

    def save_related(self, request, form, formsets, change):
        pass

    def _bulk(self, request, queryset, outcome):
        reviewer = Reviewer(user=request.user, source="admin_bulk")
        run_bulk(
            self,
            request,
            queryset,
            lambda e: execution_review(
                execution=e.pk, reviewer=reviewer, outcome=outcome, notes=f"Reviewed {outcome} in bulk by {request.user}"
            ),
            f"Reviewed {outcome}",
        )

    @admin.action(description="Review selected executions: correct", permissions=["change"])
    def mark_correct(self, request, queryset):
        self._bulk(request, queryset, ReviewOutcome.CORRECT)

    @admin.action(description="Review selected executions: incorrect", permissions=["change"])
    def mark_incorrect(self, request, queryset):
        reviewer = Reviewer(user=request.user, source="admin_bulk")
        return bulk_rejection(
            self,
            request,
            queryset,
            change="marked incorrect",
            apply=lambda e, category, notes: execution_review(
                execution=e.pk, reviewer=reviewer, outcome=ReviewOutcome.INCORRECT, notes=notes, mistake_category=category
            ),
            done="Reviewed incorrect",
        )


def bulk_rejection(modeladmin, request, queryset, *, change: str, apply, done: str):
    """Reject several items of one kind behind a confirmation that lists each and asks the mistake category."""
    rows = list(queryset.select_related("agent", "action"))
    error = ""
    if request.POST.get("post") == "yes":
        category = request.POST.get("category", "").strip()
        notes = request.POST.get("notes", "").strip()
        if category:
            run_bulk(modeladmin, request, queryset, lambda obj: apply(obj, category, notes), done)
            return None
        error = "Choose a reason: rejections without one never form mistake patterns."
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Confirm: {len(rows)} {modeladmin.model._meta.verbose_name_plural} {change}",
        "intro": f"Each of these {len(rows)} items will be {change}.",
        "opts": modeladmin.model._meta,
        "rows": [(obj, change) for obj in rows],
        "queryset": rows,
        "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        "action_name": request.POST.get("action", ""),
        "categories": review_categories(),
        "submit": f"Yes, {change.split()[0]} {len(rows)}",
        "error": error,
    }
    return TemplateResponse(request, "admin/feedback/bulk_rejection.html", context)


def review_categories() -> list[str]:
    preset = list(settings.REVIEW_MISTAKE_CATEGORIES)
    return preset + [c for c in mistake_categories_in_use() if c not in preset]


class FeedbackRecordReadOnlyMixin:
    """A feedback record (live or archived) is evidence: shown, never added, edited or deleted in the admin."""

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


@admin.register(FeedbackRecord)
class FeedbackRecordAdmin(FeedbackRecordReadOnlyMixin, admin.ModelAdmin):
    """Feedback records by agent, action and type (read only: they are written by the services)."""

    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = [
        "id",
        "agent",
        "action",
        "feedback_type",
        "mistake_category",
        "agent_confidence",
        "pattern",
        "source",
        "created_at",
    ]
    list_filter = [
        "feedback_type",
        ("agent", BoundedRelatedFilter),
        ("action", BoundedRelatedFilter),
        ("source", TopValuesFilter),
        "processed",
    ]
    list_select_related = ["agent", "action", "pattern__agent", "pattern__action"]  # the pattern's name shows both
    search_fields = ["human_explanation", "mistake_category", "action__name", "agent__name"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "agent",
        "action",
        "proposal",
        "execution",
        "feedback_type",
        "original_json",
        "corrected_json",
        "delta_json",
        "human_explanation",
        "agent_confidence",
        "context_json",
        "mistake_category",
        "pattern",
        "correction_rule",
        "processed",
        "processed_at",
        "created_by",
        "created_by_key",
        "source",
        "created_at",
    ]
    fields = readonly_fields
