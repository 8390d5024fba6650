"""Admin list and CSV export of archived feedback records."""

import csv
import json
from contextlib import nullcontext

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.urls import path, reverse

from common.admin import BoundedRelatedFilter, TopValuesFilter
from feedback.admin.reviews import FeedbackRecordReadOnlyMixin
from feedback.models import (
    FeedbackRecordArchive,
)
from tenants.context import tenant_scope, tenant_scope_current


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
    # The server reads the rows after the request's scope ended (a web connection then sees no tenant): read them in
    # the reviewer's scope again, not in none.
    scope = tenant_scope_current()

    def rows():
        yield writer.writerow(columns)
        with tenant_scope(scope) if scope is not None else nullcontext():
            for row in queryset.order_by("id").values_list(*columns).iterator(chunk_size=2000):
                yield writer.writerow([_csv_cell(v) for v in row])

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@admin.register(FeedbackRecordArchive)
class FeedbackRecordArchiveAdmin(FeedbackRecordReadOnlyMixin, admin.ModelAdmin):
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
    list_filter = [
        "feedback_type",
        ("agent", BoundedRelatedFilter),
        ("action", BoundedRelatedFilter),
        ("source", TopValuesFilter),
    ]
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
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:  # as the changelist answers a filter it cannot apply
            return HttpResponseRedirect(reverse("admin:feedback_feedbackrecordarchive_changelist") + "?e=1")
        return archive_csv_response(changelist.get_queryset(request))

    @admin.action(description="Export selected archived records as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        return archive_csv_response(queryset)
