"""Admin screens of calibration, autonomy transitions and cycle episodes."""

from django.contrib import admin
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from actions.admin import ActionAdmin
from actions.models import Action
from autonomy import selectors as autonomy_selectors
from autonomy import services as autonomy_services
from autonomy.calibration import bucket_labels
from autonomy.models import AutonomyTransition, CalibrationRecord, Episode, EpisodeEvent, TransitionStatus
from common.admin import (
    INLINE_ROWS_MAX,
    BoundedRelatedFilter,
    HistoryAdmin,
    RelatedHistoryRows,
    TopValuesFilter,
    newest_rows_formset,
    pretty_json,
    run_bulk,
)

APPROVE_PERMISSION = "autonomy.approve_autonomytransition"


@admin.register(CalibrationRecord)
class CalibrationRecordAdmin(admin.ModelAdmin):
    """Calibration runs; each page shows the reliability diagram and the agent's ECE trend (Chart.js)."""

    change_form_template = "admin/autonomy/calibrationrecord/change_form.html"
    list_display = ["id", "agent", "scope", "computed_at", "sample_count", "ece", "recommended_adjustment"]
    list_filter = [("agent", BoundedRelatedFilter), ("action", admin.EmptyFieldListFilter)]
    list_select_related = ["agent", "action"]
    readonly_fields = [
        "agent",
        "action",
        "window_days",
        "computed_at",
        "sample_count",
        "total_samples",
        "buckets_json",
        "mean_confidence",
        "mean_success",
        "ece",
        "overconfidence_rate",
        "underconfidence_rate",
        "raw_adjustment",
        "recommended_adjustment",
        "episode",
    ]
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
                    {
                        "label": label,
                        "x": b["mean_confidence"],
                        "y": b["success_rate"],
                        "count": b["count"],
                        "counted": b["counted"],
                    }
                    for b, label in zip(record.buckets, bucket_labels(record.buckets, sep="–"), strict=True)
                    if b["count"]
                ],
                "trend": [{"x": r.computed_at.strftime("%Y-%m-%d %H:%M"), "y": round(r.ece, 4)} for r in trend],
                "scope": self.scope(record),
            }
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(AutonomyTransition)
class AutonomyTransitionAdmin(RelatedHistoryRows, HistoryAdmin):
    """Proposed autonomy changes with their evidence. The page is read-only: a transition is decided in the review
    inbox or by the bulk actions, each behind a confirmation naming the action and both levels."""

    list_display = ["id", "action", "from_level", "to_level", "status", "created_at", "decided_at", "decided_by"]
    list_filter = ["status", ("action", BoundedRelatedFilter)]
    list_select_related = ["action", "decided_by"]
    readonly_fields = [
        "action",
        "from_level",
        "to_level",
        "status",
        "reason",
        "evidence_json",
        "episode",
        "created_at",
        "decided_by",
        "decided_by_key",
        "decided_at",
        "decision_notes",
        "decide_link",
    ]
    actions = ["approve_selected", "reject_selected"]

    def get_fieldsets(self, request, obj=None):
        info = (
            "Proposal and evidence",
            {"fields": ["action", "from_level", "to_level", "status", "reason", "evidence_json", "episode", "created_at"]},
        )
        if obj is not None and obj.status == TransitionStatus.PROPOSED:
            return [info, ("Decision", {"fields": ["decide_link"]})]
        return [info, ("Decision", {"fields": ["decided_by", "decided_by_key", "decided_at", "decision_notes"]})]

    @admin.display(description="Evidence")
    def evidence_json(self, obj):
        return pretty_json(obj.evidence)

    @admin.display(description="Decide")
    def decide_link(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return format_html(
            '<a class="button" href="{}">Decide in the review inbox…</a> (a confirmation names the action and both levels)',
            reverse("review-decide", args=["transition", obj.pk]),
        )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # decisions go through the inbox or the bulk actions, each with its confirmation

    def has_delete_permission(self, request, obj=None):
        return False

    def has_approve_permission(self, request):
        return request.user.has_perm(APPROVE_PERMISSION)

    def _decide(self, request, queryset, *, action: str, approve: bool):
        """A confirmation page naming each action and both levels; the decision only after "post"."""
        queryset = queryset.select_related("action")
        if request.POST.get("post") != "yes":
            verb = "Approve and apply" if approve else "Reject"
            rows = [
                (
                    t,
                    f"{t.action.name}: level {t.from_level} → {t.to_level}"
                    if approve
                    else f"{t.action.name} stays at level {t.from_level}",
                )
                for t in queryset
            ]
            context = {
                **self.admin_site.each_context(request),
                "title": f"{verb} autonomy transitions",
                "intro": (
                    "Approving changes what each agent may do alone, at once."
                    if approve
                    else "Rejecting leaves each level as it is."
                ),
                "submit": verb,
                "opts": self.model._meta,
                "queryset": queryset,
                "rows": rows,
                "action_name": action,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(request, "admin/autonomy/autonomytransition/decision_confirmation.html", context)
        notes = request.POST.get("notes", "")
        service = autonomy_services.autonomy_transition_approve if approve else autonomy_services.autonomy_transition_reject
        run_bulk(
            self,
            request,
            queryset,
            lambda t: service(transition=t.pk, user=request.user, notes=notes),
            "Applied" if approve else "Rejected",
        )
        return None

    @admin.action(description="Approve and apply selected transitions", permissions=["approve"])
    def approve_selected(self, request, queryset):
        return self._decide(request, queryset, action="approve_selected", approve=True)

    @admin.action(description="Reject selected transitions", permissions=["approve"])
    def reject_selected(self, request, queryset):
        return self._decide(request, queryset, action="reject_selected", approve=False)


class EpisodeEventInline(admin.TabularInline):
    model = EpisodeEvent
    formset = newest_rows_formset("-seq")
    verbose_name_plural = f"episode events (the last {INLINE_ROWS_MAX}, in order)"
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


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    """Episodic memory: each learning run and its ordered events."""

    list_display = ["id", "agent", "kind", "trigger", "status", "started_at", "finished_at", "summary_text"]
    list_filter = ["status", ("kind", TopValuesFilter), ("trigger", TopValuesFilter), ("agent", BoundedRelatedFilter)]
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


admin.site.unregister(Action)


@admin.register(Action)
class ActionAutonomyAdmin(ActionAdmin):
    """The action catalogue, with the emergency stop: a human demotes an action to level 1 at once."""

    actions = ["emergency_stop"]

    def has_approve_permission(self, request):
        return request.user.has_perm(APPROVE_PERMISSION)

    @admin.action(description="Emergency stop: demote to level 1 (propose only) now", permissions=["approve"])
    def emergency_stop(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("post") != "yes" or not reason:
            context = {
                **self.admin_site.each_context(request),
                "title": "Emergency stop",
                "opts": self.model._meta,
                "queryset": queryset,
                "action_name": "emergency_stop",
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "error": "Say why the actions are stopped." if request.POST.get("post") == "yes" else "",
                "media": self.media,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(request, "admin/actions/action/stop_confirmation.html", context)
        run_bulk(
            self,
            request,
            queryset,
            lambda a: autonomy_services.action_autonomy_stop(action=a, user=request.user, reason=reason),
            "Stopped",
        )
        return None
