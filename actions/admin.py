"""Admin screen of the action catalogue."""

from django.contrib import admin

from actions.models import Action
from common.admin import HistoryAdmin, revert_link
from tenants.admin import TenantChoiceMixin

REVERT_LEVEL = revert_link("autonomy")


@admin.register(Action)
class ActionAdmin(TenantChoiceMixin, HistoryAdmin):
    """The action catalogue. A new action starts at level 1 (propose only); a level changes only through an approved
    autonomy transition."""

    list_display = ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at"]
    list_filter = ["autonomy_level", "auto_registered"]
    search_fields = ["name", "description"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ["autonomy_level", "auto_registered", "last_evaluated_at"]
        return ["name", "autonomy_level", "auto_registered", "last_evaluated_at", "created_at", REVERT_LEVEL]

    def has_delete_permission(self, request, obj=None):
        return False
