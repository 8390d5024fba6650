"""Admin screens of disambiguation requests, learning signals, phrase evidence and fitted resolution profiles."""

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import PAGE_VAR
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from common.admin import (
    BoundedValuesFilter,
    LogWithoutTexts,
    SaveChangedOnly,
    TopValuesFilter,
    confirm_bulk,
    rounded,
    signal_direction,
)
from common.api import ApplicationError as _ApplicationError
from learning import selectors as _selectors
from learning.models import (
    AbandonEvent,
    DisambiguationRequest,
    FittedResolutionProfile,
    LearningSignal,
    PhraseEvidence,
)
from learning.services.disambiguations import SWEEP_MAX_FAILURES
from learning.services.profiles import resolution_profile_activate, resolution_profile_fit, resolution_profile_retire
from tenants.context import tenant_scope
from tenants.selectors import user_tenants

CHART_ROWS = 30  # bars drawn above a table
OUTCOME_ROWS_PER_PAGE = 100  # verbs in a page of the outcomes table
OUTCOME_DEFAULT_DAYS = 30  # the reports of ambiguous answers read this many days of them unless another period is chosen
PERIOD_VAR = "days"


def outcome_periods() -> list[int]:
    """The periods the reports of ambiguous answers offer, in days: none longer than the requests are kept."""
    kept = settings.RESOLUTION_RETENTION_DAYS
    return sorted({d for d in (1, 7, OUTCOME_DEFAULT_DAYS) if d < kept} | {kept})


def report_period(request) -> tuple[list[int], int]:
    """(the periods offered, the one chosen: ``?days=`` when offered, else the default) of a report's page."""
    periods = outcome_periods()
    days = request.GET.get(PERIOD_VAR, "")
    return periods, int(days) if days in {str(d) for d in periods} else min(OUTCOME_DEFAULT_DAYS, periods[-1])


def _outcomes_chart(rows: list[dict]) -> dict:
    """Shares of what became of the requests that showed each verb, as stacked horizontal bars (percent)."""
    parts = [
        ("chosen", "chosen", "#2e7d32"),
        ("another chosen", None, "#90caf9"),
        ("abandoned", "abandoned", "#e57373"),
        ("expired", "expired", "#ffb74d"),
        ("open", "open", "#bdbdbd"),
    ]
    datasets = []
    for label, key, color in parts:
        if key is None:
            data = [round(r["selected_pct"] - r["chosen_pct"], 1) for r in rows]
        else:
            data = [r[f"{key}_pct"] for r in rows]
        datasets.append({"label": label, "data": data, "color": color})
    return {"labels": [r["verb"] for r in rows], "datasets": datasets, "stacked": True, "horizontal": True, "max": 100}


def _signals_chart(rows: list[dict]) -> dict:
    """Positive and negative signals per phrase and verb, as stacked horizontal bars (counts)."""
    return {
        "labels": [f"{r['normalized'][:40]} → {r['verb']}" for r in rows],
        "datasets": [
            {"label": "for", "data": [r["positive"] for r in rows], "color": "#2e7d32"},
            {"label": "against", "data": [r["negative"] for r in rows], "color": "#c62828"},
        ],
        "stacked": True,
        "horizontal": True,
    }


class LearningSignalInline(admin.TabularInline):
    model = LearningSignal
    extra = 0
    can_delete = False
    fields = ["phrase", "verb", "outcome", signal_direction, rounded("confidence"), "result", "candidate_link", "processed_at"]
    readonly_fields = fields

    @admin.display(description="candidate")
    def candidate_link(self, obj):
        if not obj.candidate_id:
            return "—"
        url = reverse("admin:learning_learningcandidate_change", args=[obj.candidate_id])
        return format_html('<a href="{}">#{}</a>', url, obj.candidate_id)

    def has_add_permission(self, request, obj=None):
        return False


class AbandonEventInline(admin.StackedInline):
    model = AbandonEvent
    extra = 0
    can_delete = False
    readonly_fields = ["reason", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False


class SweepFailuresFilter(admin.SimpleListFilter):
    """Requests whose signals the sweep failed to learn from: retried, or left after the last try."""

    title = "learning from its signals"
    parameter_name = "sweep"

    def lookups(self, request, model_admin):
        return [("retrying", "failed, tried again"), ("left", f"failed {SWEEP_MAX_FAILURES} times, left")]

    def queryset(self, request, queryset):
        if self.value() == "retrying":
            return queryset.filter(sweep_failures__gt=0, sweep_failures__lt=SWEEP_MAX_FAILURES, processed_at__isnull=True)
        if self.value() == "left":
            return queryset.filter(sweep_failures__gte=SWEEP_MAX_FAILURES, processed_at__isnull=True)
        return queryset


@admin.register(DisambiguationRequest)
class DisambiguationRequestAdmin(LogWithoutTexts, admin.ModelAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = ["text", "user_id", "channel", "shown_options", "status", "selected_verb", "created_at"]
    list_filter = ["status", "channel", ("domain", TopValuesFilter), "created_at", SweepFailuresFilter]
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
        "sweep_failures",
        "sweep_after",
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
        return ", ".join(f"{o.get('verb', '?')} ({float(o.get('score') or 0.0):.2f})" for o in obj.options)

    @admin.display(description="options shown")
    def options_table(self, obj):
        return format_html_join(
            "",
            "<div>{}. <strong>{}</strong> — {} <small>({}, e.g. “{}”)</small></div>",
            (
                (i + 1, o["verb"], o.get("display_name", ""), f"{float(o.get('score') or 0.0):.3f}", o.get("example", ""))
                for i, o in enumerate(obj.options)
            ),
        )

    def get_urls(self):
        extra = [path("outcomes/", self.admin_site.admin_view(self.outcomes_view), name="learning_disambiguation_outcomes")]
        return extra + super().get_urls()

    def outcomes_view(self, request):
        """Per verb offered: shares of its requests selected, abandoned, expired; the most shown first, a page of
        verbs at a time however large the catalogue."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        periods, days = report_period(request)
        rows = _selectors.disambiguation_outcomes_per_verb(since=timezone.now() - timedelta(days=days))
        paginator = Paginator(rows, OUTCOME_ROWS_PER_PAGE)
        page = paginator.get_page(request.GET.get(PAGE_VAR))
        context = {
            "days": days,
            "periods": periods,
            "period_var": PERIOD_VAR,
            **self.admin_site.each_context(request),
            "title": "Disambiguation outcomes per verb",
            "opts": self.model._meta,
            "rows": page.object_list,
            "page_obj": page,
            "page_range": paginator.get_elided_page_range(page.number) if paginator.num_pages > 1 else [],
            "page_var": PAGE_VAR,
            "chart": _outcomes_chart(page.object_list[:CHART_ROWS]),
        }
        return TemplateResponse(request, "admin/learning/disambiguation_outcomes_page.html", context)


@admin.register(LearningSignal)
class LearningSignalAdmin(LogWithoutTexts, admin.ModelAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = ["phrase", "verb", "outcome", signal_direction, rounded("confidence"), "user_id", "result", "created_at"]
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
        if not self.has_view_permission(request):
            raise PermissionDenied
        search = request.GET.get("q", "").strip()
        periods, days = report_period(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "Learning signals per phrase",
            "opts": self.model._meta,
            "search": search,
            "days": days,
            "periods": periods,
            "period_var": PERIOD_VAR,
            "rows": (rows := _selectors.signals_per_phrase(search=search, since=timezone.now() - timedelta(days=days))),
            "chart": _signals_chart(rows[:CHART_ROWS]),
        }
        return TemplateResponse(request, "admin/learning/signals_per_phrase.html", context)


@admin.register(PhraseEvidence)
class PhraseEvidenceAdmin(LogWithoutTexts, SaveChangedOnly, admin.ModelAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = ["phrase", "verb", "user_id", rounded("negative"), rounded("positive"), "signal_count", "updated_at"]
    search_fields = ["normalized", "verb", "user_id"]
    list_filter = [("verb", BoundedValuesFilter)]
    readonly_fields = [
        "user_id",
        "private_agent",
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
class FittedResolutionProfileAdmin(SaveChangedOnly, admin.ModelAdmin):
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

    def has_delete_permission(self, request, obj=None):
        return False  # "retire" takes a profile out of service (and out of the cache); the row stays as history

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
        """Behind a confirmation stating both thresholds; a retired profile is not put live again."""
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one profile to activate.", messages.ERROR)
            return None
        row = queryset.get()
        if row.status == FittedResolutionProfile.Status.RETIRED:
            self.message_user(
                request, f"Profile #{row.pk} is retired and stays out of service; fit a new profile instead.", messages.ERROR
            )
            return None
        if row.status == FittedResolutionProfile.Status.ACTIVE:
            self.message_user(request, f"Profile #{row.pk} is already live.", messages.INFO)
            return None
        live = FittedResolutionProfile.objects.filter(
            tenant_id=row.tenant_id, embedding_model=row.embedding_model, status=FittedResolutionProfile.Status.ACTIVE
        ).first()
        return confirm_bulk(
            self,
            request,
            queryset,
            describe=_activate_statement,
            apply=lambda obj, _reason: resolution_profile_activate(fitted=obj, reviewer=request.user),
            done="Live",
            submit="Activate",
            ask_reason=False,
            intro=(
                "The resolver uses these thresholds at once"
                + (f"; the live profile #{live.pk} is retired." if live else ".")
                + " Your name and the time are recorded."
            ),
        )

    @admin.action(description="Retire the selected profiles", permissions=["change"])
    def retire(self, request, queryset):
        """Behind a confirmation; a retired profile never goes live again."""

        def retire(obj, _reason):
            if obj.status == FittedResolutionProfile.Status.RETIRED:
                raise _ApplicationError("already retired")
            resolution_profile_retire(fitted=obj)

        return confirm_bulk(
            self,
            request,
            queryset,
            describe=_retire_statement,
            apply=retire,
            done="Retired",
            submit="Retire",
            ask_reason=False,
            intro="A retired profile stays out of service; where a live one is retired, the settings' values apply again.",
        )

    def get_urls(self):
        extra = [path("fit/", self.admin_site.admin_view(self.fit_view), name="learning_fittedresolutionprofile_fit")]
        return extra + super().get_urls()

    def fit_view(self, request):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        # one profile per tenant the reviewer works in, each fitted on that tenant's labels only and stored there
        tenants = list(user_tenants(user=request.user).order_by("slug"))
        for tenant in tenants:
            named = f" ({tenant.slug})" if len(tenants) > 1 else ""
            try:
                with tenant_scope([tenant.pk]):
                    row = resolution_profile_fit()
                self.message_user(
                    request, f"Proposed{named}: {row}. Compare the held-out figures, then activate it.", messages.SUCCESS
                )
            except _ApplicationError as exc:
                self.message_user(request, f"{exc.message}{named}", messages.ERROR)
        return HttpResponseRedirect(reverse("admin:learning_fittedresolutionprofile_changelist"))


def _activate_statement(row: FittedResolutionProfile) -> str:
    return (
        f"resolution threshold {row.baseline.get('resolve_threshold')} → {row.resolve_threshold:.3f}, "
        f"margin {row.baseline.get('margin')} → {row.margin:.3f} for {row.embedding_model}"
    )


def _retire_statement(row: FittedResolutionProfile) -> str:
    if row.status == FittedResolutionProfile.Status.RETIRED:
        return "skipped: already retired"
    if row.status == FittedResolutionProfile.Status.ACTIVE:
        return f"taken out of service; the settings' thresholds apply again for {row.embedding_model}"
    return "retired without going live; the thresholds in force stay"
