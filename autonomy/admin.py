from django.contrib import admin, messages
from simple_history.admin import SimpleHistoryAdmin

from autonomy.authentication import verified_keys_forget
from autonomy.models import Agent, ApiKey
from autonomy.services import api_key_revoke


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False  # keys are created with `manage.py create_agent_key`, which shows the secret once


class ForgetVerifiedKeysMixin:
    """An edited agent or key (switched off, scopes changed) takes effect at once in this process."""

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        verified_keys_forget()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        verified_keys_forget()

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        verified_keys_forget()


@admin.register(Agent)
class AgentAdmin(ForgetVerifiedKeysMixin, SimpleHistoryAdmin):
    list_display = ["name", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "description"]
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(ForgetVerifiedKeysMixin, SimpleHistoryAdmin):
    list_display = ["name", "agent", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "agent"]
    search_fields = ["name", "prefix", "agent__name"]
    readonly_fields = ["agent", "prefix", "created_at", "last_used_at", "revoked_at"]
    fields = ["agent", "name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)


# --- out: actions, correction rules, calibration (reliability diagram), transitions, episodes (issues 6-7) ---


from django import forms  # noqa: E402
from django.core.exceptions import PermissionDenied  # noqa: E402
from django.http import HttpResponseNotAllowed, HttpResponseRedirect  # noqa: E402
from django.middleware.csrf import get_token  # noqa: E402
from django.shortcuts import get_object_or_404  # noqa: E402
from django.urls import path, reverse  # noqa: E402
from django.utils.html import format_html  # noqa: E402

from autonomy import selectors as autonomy_selectors  # noqa: E402
from autonomy import services as autonomy_services  # noqa: E402
from autonomy.admin_helpers import pretty_json, run_bulk  # noqa: E402
from autonomy.models import (  # noqa: E402
    Action,
    AutonomyTransition,
    CalibrationRecord,
    CorrectionRule,
    CorrectionRuleStatus,
    EpisodeEvent,
    LearningEpisode,
    TransitionStatus,
)
from config.api import ApplicationError  # noqa: E402


@admin.register(Action)
class ActionAdmin(SimpleHistoryAdmin):
    """The action catalogue. A level changes only through an approved autonomy transition."""

    list_display = ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at"]
    list_filter = ["autonomy_level", "auto_registered"]
    search_fields = ["name", "description"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ["last_evaluated_at"]
        return ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(CorrectionRule)
class CorrectionRuleAdmin(SimpleHistoryAdmin):
    """Procedural memory; approve pending rules, deactivate any in one click. History keeps the audit trail."""

    list_filter = ["status", "require_review", "agent", "action"]
    list_select_related = ["agent", "action", "pattern"]
    search_fields = ["precondition", "agent__name", "action__name"]
    readonly_fields = ["agent", "action", "pattern", "precondition", "correction_json", "require_review", "status",
                       "expires_at", "created_at", "approved_by", "approved_at", "deactivated_by", "deactivated_at"]
    fields = readonly_fields
    actions = ["approve_selected", "deactivate_selected"]

    def get_list_display(self, request):
        token = get_token(request)

        @admin.display(description="")
        def one_click(obj):
            if obj.status not in (CorrectionRuleStatus.ACTIVE, CorrectionRuleStatus.PENDING):
                return ""
            url = reverse("admin:autonomy_correctionrule_deactivate", args=[obj.pk])
            return format_html(
                '<form method="post" action="{}" style="margin:0"><input type="hidden" name="csrfmiddlewaretoken" value="{}">'
                '<input type="submit" class="button" value="Deactivate"></form>', url, token,
            )

        return ["id", "agent", "action", "status", "require_review", "expires_at", "created_at", one_click]

    def get_urls(self):
        return [
            path("<int:pk>/deactivate/", self.admin_site.admin_view(self.deactivate_view), name="autonomy_correctionrule_deactivate"),
            *super().get_urls(),
        ]

    def deactivate_view(self, request, pk):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        rule = get_object_or_404(CorrectionRule, pk=pk)
        if not self.has_change_permission(request, rule):
            raise PermissionDenied
        try:
            autonomy_services.correction_rule_deactivate(rule=rule, user=request.user)
            self.message_user(request, f"Rule #{pk} deactivated.", messages.SUCCESS)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:autonomy_correctionrule_changelist"))

    @admin.display(description="Correction")
    def correction_json(self, obj):
        return pretty_json(obj.correction)

    def has_add_permission(self, request):
        return False  # rules come from patterns

    @admin.action(description="Approve selected pending rules", permissions=["change"])
    def approve_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda r: autonomy_services.correction_rule_approve(rule=r, user=request.user), "Approved")

    @admin.action(description="Deactivate selected rules", permissions=["change"])
    def deactivate_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda r: autonomy_services.correction_rule_deactivate(rule=r, user=request.user),
                 "Deactivated")


@admin.register(CalibrationRecord)
class CalibrationRecordAdmin(admin.ModelAdmin):
    """Calibration runs; each page shows the reliability diagram and the agent's ECE trend (Chart.js)."""

    change_form_template = "admin/autonomy/calibrationrecord/change_form.html"
    list_display = ["id", "agent", "scope", "computed_at", "sample_count", "ece", "recommended_adjustment"]
    list_filter = ["agent", ("action", admin.EmptyFieldListFilter)]
    list_select_related = ["agent", "action"]
    readonly_fields = ["agent", "action", "window_days", "computed_at", "sample_count", "total_samples", "buckets_json",
                       "mean_confidence", "mean_success", "ece", "overconfidence_rate", "underconfidence_rate",
                       "raw_adjustment", "recommended_adjustment", "episode"]
    fields = readonly_fields

    @admin.display(description="Scope")
    def scope(self, obj):
        return obj.action.name if obj.action_id else "overall"

    @admin.display(description="Buckets")
    def buckets_json(self, obj):
        return pretty_json(obj.buckets)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        record = self.get_object(request, object_id)
        if record is not None:
            trend = autonomy_selectors.calibration_history(agent_id=record.agent_id, action_id=record.action_id)
            extra_context["chart_data"] = {
                "buckets": [
                    {"label": f"{b['low']:.1f}–{b['high']:.1f}", "x": b["mean_confidence"], "y": b["success_rate"],
                     "count": b["count"], "counted": b["counted"]}
                    for b in record.buckets if b["count"]
                ],
                "trend": [{"x": r.computed_at.strftime("%Y-%m-%d %H:%M"), "y": round(r.ece, 4)} for r in trend],
                "scope": self.scope(record),
            }
        return super().change_view(request, object_id, form_url, extra_context)


class TransitionDecisionForm(forms.ModelForm):
    decision = forms.ChoiceField(choices=[("", "— no decision —"), ("approve", "Approve and apply"), ("reject", "Reject")],
                                 required=False)
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), required=False, max_length=5000)

    class Meta:
        model = AutonomyTransition
        fields = []

    def clean(self):
        data = super().clean()
        if data.get("decision") and self.instance.status != TransitionStatus.PROPOSED:
            raise forms.ValidationError(f"This transition is {self.instance.status}; it cannot be decided again.")
        return data


@admin.register(AutonomyTransition)
class AutonomyTransitionAdmin(SimpleHistoryAdmin):
    """Proposed autonomy changes with their evidence; a human approves (applies) or rejects them."""

    form = TransitionDecisionForm
    list_display = ["id", "action", "from_level", "to_level", "status", "created_at", "decided_at", "decided_by"]
    list_filter = ["status", "action"]
    list_select_related = ["action", "decided_by"]
    readonly_fields = ["action", "from_level", "to_level", "status", "reason", "evidence_json", "episode", "created_at",
                       "decided_by", "decided_by_key", "decided_at", "decision_notes"]
    actions = ["approve_selected", "reject_selected"]

    def get_fieldsets(self, request, obj=None):
        info = ("Proposal and evidence", {"fields": ["action", "from_level", "to_level", "status", "reason", "evidence_json",
                                                     "episode", "created_at"]})
        if obj is not None and obj.status == TransitionStatus.PROPOSED:
            return [info, ("Decision", {"fields": ["decision", "notes"]})]
        return [info, ("Decision", {"fields": ["decided_by", "decided_by_key", "decided_at", "decision_notes"]})]

    @admin.display(description="Evidence")
    def evidence_json(self, obj):
        return pretty_json(obj.evidence)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        d = form.cleaned_data
        try:
            if d.get("decision") == "approve":
                autonomy_services.autonomy_transition_approve(transition=obj.pk, user=request.user, notes=d["notes"])
            elif d.get("decision") == "reject":
                autonomy_services.autonomy_transition_reject(transition=obj.pk, user=request.user, notes=d["notes"])
        except ApplicationError as exc:
            self.message_user(request, f"Not applied: {exc.message}", messages.ERROR)

    def save_related(self, request, form, formsets, change):
        pass

    @admin.action(description="Approve and apply selected transitions", permissions=["change"])
    def approve_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda t: autonomy_services.autonomy_transition_approve(transition=t.pk, user=request.user),
                 "Applied")

    @admin.action(description="Reject selected transitions", permissions=["change"])
    def reject_selected(self, request, queryset):
        run_bulk(self, request, queryset, lambda t: autonomy_services.autonomy_transition_reject(transition=t.pk, user=request.user),
                 "Rejected")


class EpisodeEventInline(admin.TabularInline):
    model = EpisodeEvent
    extra = 0
    can_delete = False
    fields = ["seq", "kind", "message", "payload_json", "created_at"]
    readonly_fields = fields
    ordering = ["seq"]

    @admin.display(description="Payload")
    def payload_json(self, obj):
        return pretty_json(obj.payload)

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(LearningEpisode)
class LearningEpisodeAdmin(admin.ModelAdmin):
    """Episodic memory: each learning run and its ordered events."""

    list_display = ["id", "agent", "kind", "trigger", "status", "started_at", "finished_at", "summary_text"]
    list_filter = ["status", "kind", "trigger", "agent"]
    list_select_related = ["agent"]
    readonly_fields = ["agent", "kind", "trigger", "status", "started_at", "finished_at", "summary_text", "summary_json"]
    fields = readonly_fields
    inlines = [EpisodeEventInline]

    @admin.display(description="Summary")
    def summary_json(self, obj):
        return pretty_json(obj.summary)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
