"""Admin screens of mistake patterns and correction rules."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from common.admin import BoundedRelatedFilter, HistoryAdmin, RelatedHistoryRows, confirm_bulk, pretty_json, revert_link, run_bulk
from common.api import ApplicationError
from feedback.models import (
    CorrectionRule,
    CorrectionRuleStatus,
    FeedbackRecord,
    MistakePattern,
    PatternStatus,
)
from feedback.services.mistakes import REVIEWER_STATUSES, mistake_pattern_set_status
from feedback.services.reviews import MAX_EXPLANATION
from feedback.services.rules import correction_rule_approve, correction_rule_deactivate, correction_rules_create


class PatternReviewForm(forms.ModelForm):
    """What a reviewer may set (the service's statuses; "mitigated" comes with a correction rule) and notes within
    the service's limit, so a refusal is an error on the page."""

    resolution_notes = forms.CharField(widget=forms.Textarea, required=False, max_length=MAX_EXPLANATION)

    class Meta:
        model = MistakePattern
        fields = ["status", "resolution_notes"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "status" not in self.fields:
            return  # a reviewer who may only view patterns: every field is read-only
        current = self.instance.status if self.instance.pk else None
        self.fields["status"].choices = [
            (value, label) for value, label in PatternStatus.choices if value in REVIEWER_STATUSES or value == current
        ]


@admin.register(MistakePattern)
class MistakePatternAdmin(admin.ModelAdmin):
    """Repeated mistakes; reviewers dismiss or resolve them with notes, or turn them into rules."""

    form = PatternReviewForm
    list_display = ["id", "agent", "action", "category", "occurrence_count", "status", "last_seen", "records_link"]
    list_filter = ["status", ("agent", BoundedRelatedFilter), ("action", BoundedRelatedFilter), "category"]
    list_select_related = ["agent", "action"]
    search_fields = ["description", "category", "action__name", "agent__name"]
    readonly_fields = [
        "agent",
        "action",
        "category",
        "feedback_types",
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
        "feedback_types",
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
        count = getattr(obj, "records_n", None)  # counted in the list's own query
        return format_html('<a href="{}">{} record(s)</a>', url, obj.records.count() if count is None else count)

    def get_queryset(self, request):
        # a subquery a row: counted for the rows of the page only, not for every pattern before the page is cut
        per_pattern = FeedbackRecord.objects.filter(pattern=OuterRef("pk")).order_by().values("pattern")
        return (
            super()
            .get_queryset(request)
            .annotate(
                records_n=Coalesce(Subquery(per_pattern.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField()), 0)
            )
        )

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
        self.message_user(
            request, f"Created {len(rules)} correction rule(s) (only active patterns with no rule pending or in force get one)."
        )


@admin.register(CorrectionRule)
class CorrectionRuleAdmin(RelatedHistoryRows, HistoryAdmin):
    """Procedural memory; approve pending rules, deactivate any in one click. History keeps the audit trail."""

    list_filter = ["status", "require_review", ("agent", BoundedRelatedFilter), ("action", BoundedRelatedFilter)]

    def has_delete_permission(self, request, obj=None):
        return False  # a rule ends by deactivation or expiry, on the record; a deleted one would leave its pattern mute

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
        revert_link("rule"),
    ]
    fields = readonly_fields
    actions = ["approve_selected", "deactivate_selected"]

    def get_list_display(self, request):
        token = get_token(request)
        may_deactivate = self.has_approve_permission(request)

        @admin.display(description="")
        def one_click(obj):
            if not may_deactivate or obj.status not in (CorrectionRuleStatus.ACTIVE, CorrectionRuleStatus.PENDING):
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
        if not self.has_approve_permission(request):  # stopping a rule is the approver's call, as in the inbox
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

    def has_approve_permission(self, request):
        return request.user.has_perm("feedback.approve_correctionrule")

    @admin.action(description="Approve selected pending rules", permissions=["approve"])
    def approve_selected(self, request, queryset):
        return confirm_bulk(
            self,
            request,
            queryset.select_related("agent", "action"),
            describe=lambda r: f"becomes active for {r.agent.name} on {r.action.name}: {r.precondition[:120]}",
            apply=lambda r, reason: correction_rule_approve(rule=r, user=request.user),
            done="Approved",
            submit="Approve",
        )

    @admin.action(description="Deactivate selected rules", permissions=["approve"])
    def deactivate_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda r: correction_rule_deactivate(rule=r, user=request.user), "Deactivated")
