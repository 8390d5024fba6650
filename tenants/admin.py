from django.contrib import admin

from common.admin import HistoryAdmin
from tenants.models import Membership, Tenant


class SuperuserOnly:
    """Tenants and memberships decide who sees what: only superusers manage them."""

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(SuperuserOnly, HistoryAdmin):
    """Workspaces and the reviewers who see them; only superusers manage them."""

    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def has_delete_permission(self, request, obj=None):
        return False  # a tenant's rows are protected; retire its agents instead


@admin.register(Membership)
class MembershipAdmin(SuperuserOnly, admin.ModelAdmin):
    list_display = ["user", "tenant", "created_at"]
    list_filter = ["tenant"]
    autocomplete_fields = ["user"]

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser
