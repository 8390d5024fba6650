"""Admin screen of the bulk imports sent through the API as jobs: what each did, or why it failed (read only)."""

from django.contrib import admin

from common.admin import LogWithoutTexts
from learning.models import PhraseImportJob


@admin.register(PhraseImportJob)
class PhraseImportJobAdmin(LogWithoutTexts, admin.ModelAdmin):
    """Import jobs, newest first; their rows are not shown (up to LEARNING_IMPORT_MAX_ROWS, and emptied once a job
    ends): the outcome says what was written."""

    show_full_result_count = False
    list_display = ["id", "created_at", "status", "row_count", "user_id", "source", "agent", "finished_at", "error_code"]
    list_filter = ["status"]
    list_select_related = ["agent"]
    search_fields = ["user_id", "source"]
    exclude = ["rows"]
    readonly_fields = [f.name for f in PhraseImportJob._meta.fields if f.name != "rows"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("rows")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
