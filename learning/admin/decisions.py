"""Admin screens of the learned act-or-ask decision: fits (pin, roll back) and stored resolutions."""

import math

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from common.admin import LogWithoutTexts, SaveChangedOnly
from common.api import ApplicationError
from learning.models import (
    DecisionFit,
    DecisionFitEvent,
    ResolutionRecord,
)
from learning.services.decisions import decision_fit_pin, decision_fit_retire_live, decision_fit_unpin

# --- The learned auto-resolve decision ---


class DecisionFitEventInline(admin.TabularInline):
    model = DecisionFitEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "action", "previous_version", "reason", "by"]
    fields = readonly_fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("fit", "by")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(DecisionFit)
class DecisionFitAdmin(SaveChangedOnly, admin.ModelAdmin):
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
        "compared",
        "shadow_figures",
        "exact_answers",
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

    @admin.display(description="on the same unseen labels (this fit / the fit in use)")
    def compared(self, obj):
        """Both fits on the labels the fit in use did not learn from (all for the prior; those of resolutions
        answered since it was made for a fit from labels); "-" when there are none or a stored figure is damaged."""
        mine = obj.params.get("held_out_judged") if isinstance(obj.params, dict) else None
        theirs = obj.held_out_in_use

        def share(figures, key):
            value = figures.get(key) if isinstance(figures, dict) else None
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            return value if ok else None

        shares = [share(mine, "right"), share(theirs, "right"), share(mine, "wrong"), share(theirs, "wrong")]
        n = share(theirs, "n")
        if not n or n != share(mine, "n") or any(v is None for v in shares):
            return "-"
        return f"{int(n)} labels: right {shares[0]:.1%} / {shares[1]:.1%}, wrong {shares[2]:.1%} / {shares[3]:.1%}"

    @admin.display(description="trusted exact answers (labelled, when fitted)")
    def exact_answers(self, obj):
        """The trusted exact phrases' labelled answers among the labels this fit saw (no fit gates them): "-" for a
        prior, a fit from before they were counted, or damaged figures."""
        figures = obj.params.get("exact_answers") if isinstance(obj.params, dict) else None
        values = [figures.get(k) if isinstance(figures, dict) else None for k in ("n", "wrong")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values) or values[1] > values[0]:
            return "-"
        n, wrong = values
        if not n:
            return "none labelled"
        flag = " (above the target)" if figures.get("above_target") is True else ""
        return f"{wrong} wrong of {n} ({wrong / n:.1%}){flag}"

    def _confirm(self, request, queryset, *, action, title, intro):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "intro": intro,
            "opts": self.model._meta,
            "queryset": queryset,
            "live": DecisionFit.objects.filter(
                status=DecisionFit.Status.LIVE, tenant_id__in=queryset.values("tenant_id")
            ).select_related("tenant"),
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
        pinned = [row for row in queryset if row.pinned]
        for row in pinned:
            decision_fit_unpin(fit=row, reviewer=request.user)
        if pinned:
            self.message_user(request, f"Unpinned {len(pinned)} fit(s).", messages.SUCCESS)
        else:
            self.message_user(request, "None of the selected fits was pinned; nothing changed.", messages.INFO)

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
        # each selected fit's tenant rolls back to its own prior (a superuser's selection may span tenants)
        for tenant_id in sorted(set(queryset.values_list("tenant_id", flat=True))):
            try:
                row = decision_fit_retire_live(tenant_id=tenant_id, reviewer=request.user)
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                continue
            self.message_user(request, f"Live and pinned: {row} ({row.tenant}).", messages.SUCCESS)
        return None


@admin.register(ResolutionRecord)
class ResolutionRecordAdmin(LogWithoutTexts, SaveChangedOnly, admin.ModelAdmin):
    """Every resolution with its explanation and, once the user answered, its label."""

    show_full_result_count = False  # a large table: no second count(*) of every row on each page
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
