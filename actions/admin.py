"""Admin screen of the action catalogue."""

from django.contrib import admin

from actions.models import Action
from common.admin import HistoryAdmin, revert_link

REVERT_LEVEL = revert_link("autonomy")


@admin.register(Action)
class ActionAdmin(HistoryAdmin):
    """The action catalogue. A level changes only through an approved autonomy transition."""

    list_display = ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at"]
    list_filter = ["autonomy_level", "auto_registered"]
    search_fields = ["name", "description"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ["last_evaluated_at"]
        return ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at", REVERT_LEVEL]

    def has_delete_permission(self, request, obj=None):
        return False
