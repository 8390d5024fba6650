"""Admin screens of the feedback app: proposal and execution review queues, feedback records, mistake
patterns and correction rules. Every screen calls the same services as the API."""

import csv
import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, StreamingHttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from common.admin import JsonObjectField, pretty_json, run_bulk
from common.api import ApplicationError
from feedback.delta import delta_is_empty, json_delta
from feedback.models import (
    CorrectionRule,
    CorrectionRuleStatus,
    Execution,
    FeedbackRecord,
    FeedbackRecordArchive,
    MistakePattern,
    PatternStatus,
    Proposal,
    ProposalStatus,
    ReviewOutcome,
)
from feedback.services.mistakes import mistake_pattern_set_status
from feedback.services.reviews import Reviewer, execution_review, proposal_approve, proposal_modify, proposal_reject
from feedback.services.rules import correction_rule_approve, correction_rule_deactivate, correction_rules_create

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

    form = ProposalReviewForm
    list_display = ["id", "agent", "action", "status", "confidence", "created_at", "reviewed_at"]
    list_filter = ["status", "agent", "action"]
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
        run_bulk(
            self,
            request,
            queryset,
            lambda p: proposal_reject(proposal=p.pk, reviewer=reviewer, notes=f"Rejected in bulk by {request.user}"),
            "Rejected",
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


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    """The execution review queue: correct or incorrect, with notes."""

    form = ExecutionReviewForm
    list_display = ["id", "agent", "action", "success", "confidence", "review_outcome", "created_at"]
    list_filter = [("review_outcome", admin.EmptyFieldListFilter), "review_outcome", "success", "agent", "action"]
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
        self._bulk(request, queryset, ReviewOutcome.INCORRECT)


@admin.register(FeedbackRecord)
class FeedbackRecordAdmin(admin.ModelAdmin):
    """Feedback records by agent, action and type (read only: they are written by the services)."""

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
    list_filter = ["feedback_type", "agent", "action", "source", "processed"]
    list_select_related = ["agent", "action", "pattern"]
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


class PatternReviewForm(forms.ModelForm):
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
    readonly_fields = [
        "agent",
        "action",
        "category",
        "description",
        "common_explanation",
        "correction_json",
        "occurrence_count",
        "first_seen",
        "last_seen",
        "records_link",
        "resolved_by",
        "resolved_at",
        "created_at",
        "updated_at",
    ]
    fields = [
        "agent",
        "action",
        "category",
        "description",
        "common_explanation",
        "correction_json",
        "occurrence_count",
        "first_seen",
        "last_seen",
        "records_link",
        "status",
        "resolution_notes",
        "resolved_by",
        "resolved_at",
    ]
    actions = ["dismiss_selected", "resolve_selected", "create_rules"]

    @admin.display(description="Most common correction")
    def correction_json(self, obj):
        return pretty_json(obj.common_correction)

    @admin.display(description="Contributing records")
    def records_link(self, obj):
        url = reverse("admin:feedback_feedbackrecord_changelist") + f"?pattern__id__exact={obj.pk}"
        return format_html('<a href="{}">{} record(s)</a>', url, obj.records.count())

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        if "status" in form.changed_data or "resolution_notes" in form.changed_data:
            mistake_pattern_set_status(
                pattern=obj.pk, status=form.cleaned_data["status"], notes=form.cleaned_data["resolution_notes"], user=request.user
            )

    @admin.action(description="Dismiss selected patterns", permissions=["change"])
    def dismiss_selected(self, request, queryset):
        run_bulk(
            self,
            request,
            queryset,
            lambda p: mistake_pattern_set_status(
                pattern=p.pk, status=PatternStatus.DISMISSED, notes=f"Dismissed in bulk by {request.user}", user=request.user
            ),
            "Dismissed",
        )

    @admin.action(description="Resolve selected patterns", permissions=["change"])
    def resolve_selected(self, request, queryset):
        run_bulk(
            self,
            request,
            queryset,
            lambda p: mistake_pattern_set_status(
                pattern=p.pk, status=PatternStatus.RESOLVED, notes=f"Resolved in bulk by {request.user}", user=request.user
            ),
            "Resolved",
        )

    @admin.action(description="Create correction rules from selected active patterns", permissions=["change"])
    def create_rules(self, request, queryset):

        rules = correction_rules_create(pattern_ids=list(queryset.values_list("pk", flat=True)), user=request.user)
        self.message_user(request, f"Created {len(rules)} correction rule(s) (only active patterns without one get a rule).")


@admin.register(CorrectionRule)
class CorrectionRuleAdmin(SimpleHistoryAdmin):
    """Procedural memory; approve pending rules, deactivate any in one click. History keeps the audit trail."""

    list_filter = ["status", "require_review", "agent", "action"]
    list_select_related = ["agent", "action", "pattern"]
    search_fields = ["precondition", "agent__name", "action__name"]
    readonly_fields = [
        "agent",
        "action",
        "pattern",
        "precondition",
        "correction_json",
        "require_review",
        "status",
        "expires_at",
        "created_at",
        "approved_by",
        "approved_at",
        "deactivated_by",
        "deactivated_at",
    ]
    fields = readonly_fields
    actions = ["approve_selected", "deactivate_selected"]

    def get_list_display(self, request):
        token = get_token(request)

        @admin.display(description="")
        def one_click(obj):
            if obj.status not in (CorrectionRuleStatus.ACTIVE, CorrectionRuleStatus.PENDING):
                return ""
            url = reverse("admin:feedback_correctionrule_deactivate", args=[obj.pk])
            return format_html(
                '<form method="post" action="{}" style="margin:0"><input type="hidden" name="csrfmiddlewaretoken" value="{}">'
                '<input type="submit" class="button" value="Deactivate"></form>',
                url,
                token,
            )

        return ["id", "agent", "action", "status", "require_review", "expires_at", "created_at", one_click]

    def get_urls(self):
        return [
            path(
                "<int:pk>/deactivate/",
                self.admin_site.admin_view(self.deactivate_view),
                name="feedback_correctionrule_deactivate",
            ),
            *super().get_urls(),
        ]

    def deactivate_view(self, request, pk):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        rule = get_object_or_404(CorrectionRule, pk=pk)
        if not self.has_change_permission(request, rule):
            raise PermissionDenied
        try:
            correction_rule_deactivate(rule=rule, user=request.user)
            self.message_user(request, f"Rule #{pk} deactivated.", messages.SUCCESS)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:feedback_correctionrule_changelist"))

    @admin.display(description="Correction")
    def correction_json(self, obj):
        return pretty_json(obj.correction)

    def has_add_permission(self, request):
        return False  # rules come from patterns

    @admin.action(description="Approve selected pending rules", permissions=["change"])
    def approve_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda r: correction_rule_approve(rule=r, user=request.user), "Approved")

    @admin.action(description="Deactivate selected rules", permissions=["change"])
    def deactivate_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda r: correction_rule_deactivate(rule=r, user=request.user), "Deactivated")


class _Echo:
    def write(self, value):
        return value


def _csv_cell(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "" if value is None else value


def archive_csv_response(queryset, filename: str = "feedback-records-archive.csv") -> StreamingHttpResponse:
    """Stream archived records as CSV (every column, JSON columns as JSON text), without loading them all."""
    columns = [f.attname for f in FeedbackRecordArchive._meta.concrete_fields]
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(columns)
        for row in queryset.order_by("id").values_list(*columns).iterator(chunk_size=2000):
            yield writer.writerow([_csv_cell(v) for v in row])

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@admin.register(FeedbackRecordArchive)
class FeedbackRecordArchiveAdmin(admin.ModelAdmin):
    """Feedback records past the retention (read only). Export the selection, or the filtered list at
    ``export-csv/`` (same filters as the changelist), as CSV."""

    list_display = [
        "id",
        "agent",
        "action",
        "feedback_type",
        "mistake_category",
        "agent_confidence",
        "pattern_id",
        "created_at",
        "archived_at",
    ]
    list_filter = ["feedback_type", "agent", "action", "source"]
    list_select_related = ["agent", "action"]
    search_fields = ["human_explanation", "mistake_category"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    actions = ["export_csv"]
    readonly_fields = [
        "id",
        "agent",
        "action",
        "proposal_id",
        "execution_id",
        "feedback_type",
        "original_json",
        "corrected_json",
        "delta_json",
        "human_explanation",
        "agent_confidence",
        "context_json",
        "mistake_category",
        "pattern_id",
        "correction_rule_id",
        "processed",
        "processed_at",
        "created_by_id",
        "created_by_key_id",
        "source",
        "created_at",
        "archived_at",
    ]
    fields = readonly_fields

    def get_urls(self):
        return [
            path("export-csv/", self.admin_site.admin_view(self.export_view), name="feedback_feedbackrecordarchive_export"),
            *super().get_urls(),
        ]

    def export_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        changelist = self.get_changelist_instance(request)
        return archive_csv_response(changelist.get_queryset(request))

    @admin.action(description="Export selected archived records as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        return archive_csv_response(queryset)

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
