"""The admin page of a data subject's request: name the user and the tenant, see what would be deleted, confirm.

A plain view behind ``admin.site.admin_view`` (the admin's login, staff check and CSRF), for a reviewer who may
delete learned phrases and memories; the erasure itself is ``privacy.services.user_data_erase``."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render

from common.api import ApplicationError
from common.validators import USER_ID_RE
from privacy.services import user_data_erase
from tenants.context import tenant_scope
from tenants.models import Tenant
from tenants.selectors import user_tenants

ERASE_PERMISSIONS = ("learning.delete_learnedphrase", "memories.delete_memory")


class EraseForm(forms.Form):
    user_id = forms.RegexField(
        USER_ID_RE,
        max_length=128,
        label="User id",
        help_text="As the agents send it (user_id)",
        error_messages={"invalid": "Not a user id: 1-128 letters, digits or _ . : @ -, starting with a letter or digit."},
    )
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None, help_text="The user's tenant")

    def __init__(self, *args, tenants, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants.order_by("slug")


def erase_view(request):
    if not request.user.has_perms(ERASE_PERMISSIONS):
        raise PermissionDenied
    form = EraseForm(request.POST or None, tenants=user_tenants(user=request.user))
    counted = None
    if request.method == "POST" and form.is_valid():
        user_id, tenant = form.cleaned_data["user_id"], form.cleaned_data["tenant"]
        confirmed = request.POST.get("confirm") == "yes"
        try:
            with tenant_scope([tenant.pk]):
                result = user_data_erase(user_id=user_id, dry_run=not confirmed, actor=f"reviewer {request.user.username}")
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            if confirmed:
                messages.success(
                    request,
                    f"Erased user {user_id} of {tenant.slug}: {sum(result['rows'].values())} row(s), "
                    f"{sum(result['history'].values())} audit-trail row(s); {result['decisions_scrubbed']} review "
                    f"decision(s) and {result['admin_log_scrubbed']} admin log entries no longer hold the user's texts; "
                    f"{result['idempotent_answers_erased']} stored answer(s) to idempotent requests erased.",
                )
                return redirect("privacy-erase")
            counted = {
                "user_id": user_id,
                "tenant": tenant,
                "rows": sorted({**result["rows"], **result["history"]}.items()),
                "total": sum(result["rows"].values()) + sum(result["history"].values()),
            }
    context = {**admin.site.each_context(request), "title": "Erase a user's data", "form": form, "counted": counted}
    return render(request, "privacy/erase.html", context)
