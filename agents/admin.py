"""Admin screens for agents and their API keys."""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from agents.authentication import verified_keys_forget
from agents.models import Agent, ApiKey, Scope
from agents.services import agent_name_validate, api_key_name_validate, api_key_revoke, api_key_scopes_validate, api_key_update
from common.admin import BoundedRelatedFilter, HistoryAdmin, SaveChangedOnly
from common.api import ApplicationError
from tenants.admin import TenantChoiceMixin
from tenants.context import tenant_filter_ids


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False  # keys are created with `manage.py create_agent_key`, which shows the secret once


class ForgetVerifiedKeysMixin:
    """An edited agent or key (switched off, scopes changed) takes effect at once in this process: its keys are
    forgotten when the change commits (forgotten before, a request in between would remember the old agent)."""

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        transaction.on_commit(verified_keys_forget)

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        transaction.on_commit(verified_keys_forget)

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        transaction.on_commit(verified_keys_forget)


class AgentForm(forms.ModelForm):
    def clean_name(self):
        return _refused_as_form_error(agent_name_validate, name=self.cleaned_data["name"])


@admin.register(Agent)
class AgentAdmin(ForgetVerifiedKeysMixin, TenantChoiceMixin, HistoryAdmin):
    form = AgentForm
    list_display = ["name", "tenant", "is_active", "private_user_data", "created_at"]
    list_filter = ["is_active", "private_user_data", ("tenant", admin.RelatedOnlyFieldListFilter)]  # only tenants in view
    list_select_related = ["tenant"]
    search_fields = ["name", "description"]
    readonly_fields = ["tenant"]
    inlines = [ApiKeyInline]


def _refused_as_form_error(check, **kwargs):
    try:
        return check(**kwargs)
    except ApplicationError as exc:
        raise forms.ValidationError(exc.message) from exc


class ApiKeyForm(forms.ModelForm):
    """A key's name and scopes: only the known scopes, as checkboxes."""

    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, help_text="What the key may call; at least one."
    )

    class Meta:
        model = ApiKey
        fields = ["name", "scopes"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        stored = self.initial.get("scopes")
        self.initial["scopes"] = [s for s in stored if s in Scope.values] if isinstance(stored, list) else []

    def clean_name(self):
        return _refused_as_form_error(api_key_name_validate, name=self.cleaned_data["name"])

    def clean_scopes(self):
        return _refused_as_form_error(api_key_scopes_validate, scopes=self.cleaned_data["scopes"])


@admin.register(ApiKey)
class ApiKeyAdmin(ForgetVerifiedKeysMixin, HistoryAdmin):
    """Keys of the agents of the reviewer's tenants; a key's name and scopes change through ``api_key_update``."""

    form = ApiKeyForm
    list_display = ["name", "agent", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), ("agent", BoundedRelatedFilter)]
    search_fields = ["name", "prefix", "agent__name"]
    readonly_fields = ["agent", "prefix", "created_at", "last_used_at", "revoked_at"]
    fields = ["agent", "name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        ids = tenant_filter_ids()
        return queryset if ids is None else queryset.filter(agent__tenant_id__in=ids)

    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        api_key_update(key=obj, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"])

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)


admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class ReviewerTokenAdmin(SaveChangedOnly, TokenAdmin):
    """Reviewers' personal API tokens (``Authorization: Token <key>``). A reviewer sees and creates only their own
    token, a superuser anyone's; the key is never listed: it is shown once, when the token is created."""

    list_display = ("user", "created")

    def get_queryset(self, request):
        queryset = super().get_queryset(request).select_related("user")
        return queryset if request.user.is_superuser else queryset.filter(user=request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = get_user_model().objects.filter(pk=request.user.pk)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return ("user",) if obj is not None else ()

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            self.message_user(
                request,
                f"The token of {obj.user.get_username()}: {obj.key} — copy it now; it is not shown again.",
                messages.WARNING,
            )
