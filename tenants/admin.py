"""Admin of tenants and memberships, and the add form of tenant-owned rows."""

from contextlib import nullcontext

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from common.admin import HistoryAdmin, SaveChangedOnly
from tenants.context import tenant_scope
from tenants.models import Membership, Tenant
from tenants.selectors import user_tenants

TENANT = "tenant"


class _TenantForm:
    """Gives the new row its tenant before validation, so unique constraints that include the tenant are checked
    in the form (an error on the page, not an IntegrityError)."""

    tenant_default = None  # the user's one tenant, when nothing is asked
    _tenant_given = False

    def _post_clean(self):
        tenant = self.cleaned_data.get(TENANT) if TENANT in self.fields else self.tenant_default
        if tenant is not None:
            self.instance.tenant = tenant
            self._tenant_given = True
        super()._post_clean()

    def _get_validation_exclusions(self):
        exclude = super()._get_validation_exclusions()
        if self._tenant_given:
            exclude.discard(TENANT)
        return exclude


class _TenantKeptForm:
    """The change form of a tenant-owned row: its tenant stays, and unique constraints that include it are checked
    in the form (renaming an agent to a name its tenant uses is an error on the page, not an IntegrityError)."""

    def _get_validation_exclusions(self):
        exclude = super()._get_validation_exclusions()
        if getattr(self.instance, "tenant_id", None) is not None:
            exclude.discard(TENANT)
        return exclude


class TenantChoiceMixin:
    """The add form of a tenant-owned row that has no parent to take its tenant from.

    A user who may act in several tenants (a superuser: every tenant) chooses one, required and among theirs; the
    row and its inlines are saved in that tenant's scope, so row-level security holds. With one tenant nothing is
    asked; a user without a tenant adds nothing."""

    def _add_tenants(self, request):
        """The user's tenants, and the first two of them (enough to know whether to ask); once per request."""
        if not hasattr(request, "_add_tenants"):
            tenants = user_tenants(user=request.user)
            request._add_tenants = tenants, list(tenants[:2])
        return request._add_tenants

    def has_add_permission(self, request):
        return bool(self._add_tenants(request)[1]) and super().has_add_permission(request)

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        return fields if obj is not None else [f for f in fields if f != TENANT]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        return fields if obj is not None or TENANT not in fields else [TENANT, *(f for f in fields if f != TENANT)]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is not None:
            form = super().get_form(request, obj, change=change, **kwargs)
            kept = type(form.__name__, (_TenantKeptForm, form), {})
            kept.base_fields = form.base_fields  # the metaclass built them afresh: keep the admin's (SaveChangedOnly's)
            return kept
        tenants, first = self._add_tenants(request)
        attrs = {"tenant_default": first[0] if len(first) == 1 else None}
        if len(first) > 1:
            if kwargs.get("fields"):
                kwargs["fields"] = [f for f in kwargs["fields"] if f != TENANT]  # the model's column is not editable
            attrs[TENANT] = forms.ModelChoiceField(queryset=tenants, help_text="The tenant the new row belongs to.")
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (_TenantForm, form), attrs)

    def _scope(self, obj, change):
        return tenant_scope([obj.tenant_id]) if not change and isinstance(obj.tenant_id, int) else nullcontext()

    def save_model(self, request, obj, form, change):
        with self._scope(obj, change):
            super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        with self._scope(form.instance, change):
            super().save_related(request, form, formsets, change)


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


def _keys(model, values) -> list:
    """Of ``values`` (as posted), those that can be keys of ``model``'s rows."""
    keys = []
    for value in values:
        try:
            keys.append(model._meta.pk.to_python(value))
        except ValidationError:
            continue
    return [k for k in keys if k is not None]


class _UserSelect(AutocompleteSelect):
    """The user autocomplete: a page shown again with a posted value that is no user key (``abc``) chooses none,
    where Django's widget would send that value to SQL and answer 500."""

    def optgroups(self, name, value, attr=None):
        return super().optgroups(name, _keys(self.choices.queryset.model, value), attr)


class _ReadUserSelect(_UserSelect):
    """The user autocomplete of a membership row, labelled with the user the row was read with: Django's widget
    reads its chosen user again, one query per row of the inline. Another value (a row being changed) is read."""

    read: dict = {}  # str(user id) -> label, set by the row's form

    def optgroups(self, name, value, attr=None):
        value = _keys(self.choices.queryset.model, value)  # a page shown again with a value that is no key: none chosen
        chosen = {str(v) for v in value if str(v) not in self.choices.field.empty_values}
        if not chosen or not chosen <= self.read.keys():
            return super().optgroups(name, value, attr)
        options = [] if self.is_required else [self.create_option(name, "", "", False, 0)]
        for key in sorted(chosen):
            options.append(self.create_option(name, key, self.read[key], chosen, len(options)))
        return [(None, options, 0)]


class MembershipInlineForm(forms.ModelForm):
    def _get_validation_exclusions(self):
        exclude = super()._get_validation_exclusions()
        if self.instance.pk and "user" not in self.changed_data:
            exclude.add("user")  # the row exists with this user: the user exists and the pair is unique already
        return exclude

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields.get("user")
        if field is not None and self.instance.pk and Membership.user.is_cached(self.instance):
            widget = getattr(field.widget, "widget", field.widget)  # inside the add/change links' wrapper
            if isinstance(widget, _ReadUserSelect):
                widget.read = {str(self.instance.user_id): field.label_from_instance(self.instance.user)}


class MembershipFormSet(BaseInlineFormSet):
    """Saving a tenant's page checks its memberships in the same queries however many there are: each row and each
    user the page names is read once for all of them (Django reads each again per row), and a row whose user is
    unchanged is not checked again (its user exists, and the pair is unique already)."""

    def _read_once(self, field, rows: dict) -> None:
        """``field`` answers the keys of ``rows`` from them, other values as before (a row added meanwhile, say)."""
        to_python = field.to_python

        def read(value):
            found = rows.get(str(value)) if value not in field.empty_values else None
            return found if found is not None else to_python(value)

        field.to_python = read

    def add_fields(self, form, index):
        super().add_fields(form, index)
        if not self.is_bound:
            return
        if not hasattr(self, "_rows_read"):
            named = {self.data.get(f"{self.add_prefix(i)}-user") for i in range(self.total_form_count())}
            field = form.fields.get("user")
            users = field.queryset.in_bulk(_keys(field.queryset.model, named)) if field is not None else {}
            self._rows_read = (
                {str(m.pk): m for m in self.get_queryset()},
                {str(pk): u for pk, u in users.items()},
            )
        memberships, users = self._rows_read
        if self._pk_field.name in form.fields:
            self._read_once(form.fields[self._pk_field.name], memberships)
        if "user" in form.fields:
            self._read_once(form.fields["user"], users)


class MembershipInline(admin.TabularInline):
    """A tenant's reviewers; the page reads, and saves, in the same queries however many there are."""

    model = Membership
    form = MembershipInlineForm
    formset = MembershipFormSet
    extra = 0
    autocomplete_fields = ["user"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user", "tenant")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs.setdefault("widget", _ReadUserSelect(db_field, self.admin_site, using=kwargs.get("using")))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Tenant)
class TenantAdmin(SuperuserOnly, HistoryAdmin):
    """Workspaces and the reviewers who see them; only superusers manage them."""

    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def get_readonly_fields(self, request, obj=None):
        """A slug is how commands, settings and the database default name the tenant: fixed once it exists."""
        fields = list(super().get_readonly_fields(request, obj))
        return fields if obj is None else ["slug", *fields]

    def has_delete_permission(self, request, obj=None):
        return False  # a tenant's rows are protected; retire its agents instead


@admin.register(Membership)
class MembershipAdmin(SuperuserOnly, SaveChangedOnly, admin.ModelAdmin):
    list_display = ["user", "tenant", "created_at"]
    list_filter = ["tenant"]
    autocomplete_fields = ["user"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs.setdefault("widget", _UserSelect(db_field, self.admin_site, using=kwargs.get("using")))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser


class _PeopleSuperuserOnly(SuperuserOnly):
    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser


# Users and groups cross every tenant: who may change a user may make them (or themselves) a superuser, set another
# tenant's reviewer's password, or give a group any permission. Only superusers manage them, whatever permissions a
# staff user holds; the autocomplete of the membership's user answers superusers only too.
admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class PeopleUserAdmin(_PeopleSuperuserOnly, SaveChangedOnly, UserAdmin):
    readonly_fields = ["last_login", "date_joined"]  # written by signing in and by creation, not by hand


@admin.register(Group)
class PeopleGroupAdmin(_PeopleSuperuserOnly, SaveChangedOnly, GroupAdmin):
    pass
