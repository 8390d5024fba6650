"""Small helpers shared by the outcomes/autonomy admin screens."""

import json
import re

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import get_last_value_from_parameters, reverse_field_path, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.db.models import Count, Exists, OuterRef, Subquery
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpResponseNotAllowed
from django.urls import reverse
from django.utils.html import format_html
from rest_framework.exceptions import ParseError
from simple_history.admin import SimpleHistoryAdmin

from common.api import ApplicationError
from common.parsers import RefusedValue, TooDeep, json_loads_checked


def fields_changed(obj, form) -> list[str]:
    """The model fields ``form`` changed from what its page showed (its hidden initial values; ``SaveChangedOnly``
    sends them), with the ``auto_now`` stamps when any did: what a change page may write."""
    concrete = {f.name for f in obj._meta.concrete_fields}
    fields = [name for name in form.changed_data if name in concrete]
    if not fields:
        return []
    stamps = [f.name for f in obj._meta.concrete_fields if getattr(f, "auto_now", False)]
    return [*fields, *(n for n in stamps if n not in fields)]


def unchanged_read_again(obj, fields: list[str]) -> None:
    """Read the fields of ``obj`` not in ``fields`` again, so the history row a save of ``fields`` writes records them
    as they are stored (a service may have changed them since the page read the row)."""
    others = [f.attname for f in obj._meta.concrete_fields if not f.primary_key and f.name not in fields]
    if others:
        obj.refresh_from_db(fields=others)


class SaveChangedOnly:
    """A change page writes only the fields its form changed from what the page showed, and nothing when none did:
    Django's full-row save would put back what the page read over what a service wrote meanwhile (a count, a
    decision, a block made longer), and record a change nobody made. Each field sends the value the page showed
    (``show_hidden_initial``), so a value a service changed while the page was open is not taken for an edit. The
    other fields are read again before the save, so its history row records them as they are. Every model admin
    whose change page saves without a service of its own uses it; those with one pass ``fields_changed``."""

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is not None:
            posted = request.POST if request.method == "POST" else None
            for name, field in form.base_fields.items():
                # a page shows every value it showed; a post that sent none for a field (a script) is compared with
                # the stored value, as Django compares
                if posted is None or any(re.fullmatch(rf"initial-{re.escape(name)}(_\d+)?", key) for key in posted):
                    field.show_hidden_initial = True
        return form

    def save_model(self, request, obj, form, change):
        if not change:
            return super().save_model(request, obj, form, change)
        fields = fields_changed(obj, form)
        if not fields:
            return
        try:
            unchanged_read_again(obj, fields)
            obj.save(update_fields=fields)
        except obj.DoesNotExist:
            self.message_user(request, f"Not saved: this {obj._meta.verbose_name} was deleted meanwhile.", messages.ERROR)
        except DatabaseError as exc:
            if "did not affect any rows" not in str(exc):
                raise
            self.message_user(request, f"Not saved: this {obj._meta.verbose_name} was deleted meanwhile.", messages.ERROR)


def admin_log_name(obj) -> str:
    """How the admin's log names a row of a user's data: its kind and key (``learned phrase #12``), not its text."""
    name = str(obj._meta.verbose_name)
    return name if obj.pk is None else f"{name} #{obj.pk}"


class LogWithoutTexts:
    """For the admin of a model whose rows hold a user's words or id: its entries in the admin's log of changes
    (``LogEntry``) name each row by ``admin_log_name``, never by its ``__str__``, and so do the change messages of
    inline rows (the changed fields are listed by label, as Django does). The log then keeps who changed what kind
    of row, which one and when, and an erasure of the user leaves none of their text in it, whenever the row went."""

    def _log(self, request, objects, action_flag, message="") -> list[LogEntry]:
        if isinstance(message, list):
            message = json.dumps(message)
        entries = [
            LogEntry(
                user_id=request.user.pk,
                content_type_id=ContentType.objects.get_for_model(obj, for_concrete_model=False).pk,
                object_id=obj.pk,
                object_repr=admin_log_name(obj)[:200],
                action_flag=action_flag,
                change_message=message,
            )
            for obj in objects
        ]
        if len(entries) == 1:
            entries[0].save()
            return entries
        return LogEntry.objects.bulk_create(entries)

    def log_addition(self, request, obj, message):
        return self._log(request, [obj], ADDITION, message)[0]

    def log_change(self, request, obj, message):
        return self._log(request, [obj], CHANGE, message)[0]

    def log_deletions(self, request, queryset):
        return self._log(request, queryset, DELETION)

    def construct_change_message(self, request, form, formsets, add=False):
        message = super().construct_change_message(request, form, formsets, add)
        # Django names each inline row added, changed or deleted by its text, formset by formset in this order
        rows = iter(
            [
                obj
                for formset in formsets or ()
                for obj in (*formset.new_objects, *(o for o, _ in formset.changed_objects), *formset.deleted_objects)
            ]
        )
        for entry in message:
            for detail in entry.values():
                if "object" in detail:
                    row = next(rows, None)
                    detail["object"] = admin_log_name(row) if row is not None else detail.get("name", "")
        return message


class HistoryAdmin(SaveChangedOnly, SimpleHistoryAdmin):
    """simple_history's admin, read-only and held to the admin's own rules: a history page shows an object only
    when its change page would (``get_queryset``: the reviewer's tenants; a deleted object's history only to a
    superuser, who sees every tenant), and never writes: a past version is not restored by posting it (that would
    bypass the services, their permissions and their audit; each kind that can be undone has its own revert).
    A history address whose id is not a key of the model is 404, not 500."""

    @staticmethod
    def _key_or_404(field, value):
        try:
            return field.to_python(unquote(str(value)))
        except (ValidationError, ValueError, TypeError) as exc:
            raise Http404(f"No record with {field.name} {value!r}.") from exc

    def _visible_or_404(self, request, object_id) -> None:
        pk = self._key_or_404(self.model._meta.pk, object_id)
        if self.get_queryset(request).filter(pk=pk).exists():
            return
        if request.user.is_superuser and not self.model._base_manager.filter(pk=pk).exists():
            return  # deleted: its history is all that is left
        raise Http404(f"No {self.model._meta.verbose_name} with id {object_id!r}.")

    def revert_disabled(self, request, obj=None):
        return True

    def history_view(self, request, object_id, extra_context=None):
        self._visible_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context=extra_context)

    def history_form_view(self, request, object_id, version_id, extra_context=None):
        self._visible_or_404(request, object_id)
        self._key_or_404(getattr(self.model, self.model._meta.simple_history_manager_attribute).model._meta.pk, version_id)
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"], "A past version is shown, not restored.")
        return super().history_form_view(request, object_id, version_id, extra_context=extra_context)


class RelatedHistoryRows:
    """For a ``HistoryAdmin`` whose model's ``__str__`` follows foreign keys: each row of the history page is named
    with the related rows simple_history reads with the versions (one join), not with a query per row."""

    def set_history_delta_changes(self, request, historical_records, foreign_keys_are_objs=True):
        for record in historical_records:
            version = record.history_object  # a new instance at each read: kept on the record for the template
            for field in version._meta.concrete_fields:
                if field.many_to_one and field.name in record._state.fields_cache:
                    field.set_cached_value(version, record._state.fields_cache[field.name])
            record.history_object = version
        return super().set_history_delta_changes(request, historical_records, foreign_keys_are_objs)


FILTER_CHOICES_MAX = 50  # a bounded filter links to at most this many rows; beyond, it asks for a name


class _SearchWhenMany:
    """The sidebar of a bounded filter: its links, and a search box when they are not all listed or a search is on."""

    template = "admin/bounded_related_filter.html"
    truncated = False
    search_value = ""
    search_keep = ()
    search_suffix = ""  # the search's parameter: the field's path and this
    search_lookup = ""  # what the search filters the list by, after the field's path

    def __init__(self, field, request, params, model, model_admin, field_path):
        # "agent_name", not "agent__name__icontains": the admin allows a lookup across a relation only when a
        # list filter names it, while a name that is no field is the filter's own parameter
        self.lookup_kwarg_search = f"{field_path}{self.search_suffix}"
        self.search_value = (get_last_value_from_parameters(params, self.lookup_kwarg_search) or "").strip()
        super().__init__(field, request, params, model, model_admin, field_path)
        self.used_parameters.pop(self.lookup_kwarg_search, None)  # applied by ``queryset``, an empty one not at all

    def expected_parameters(self):
        return [*super().expected_parameters(), self.lookup_kwarg_search]

    def queryset(self, request, queryset):
        queryset = super().queryset(request, queryset)
        if self.search_value:
            queryset = queryset.filter(**{f"{self.field_path}{self.search_lookup}": self.search_value})
        return queryset

    def has_output(self):
        return self.truncated or bool(self.search_value) or super().has_output()

    def choices(self, changelist):
        own = {self.lookup_kwarg, self.lookup_kwarg_isnull, self.lookup_kwarg_search}
        self.search_keep = [(k, v) for k, values in changelist.filter_params.items() if k not in own for v in values]
        for i, choice in enumerate(super().choices(changelist)):
            if i == 0:  # "All" drops the search too
                choice = {
                    **choice,
                    "selected": choice["selected"] and not self.search_value,
                    "query_string": changelist.get_query_string(remove=sorted(own)),
                }
            yield choice


class BoundedRelatedFilter(_SearchWhenMany, admin.RelatedFieldListFilter):
    """A filter by a related row (an agent, an action) that stays small however many rows there are.

    It links to each related row while there are at most ``FILTER_CHOICES_MAX``; beyond, it shows a name search
    (``<field>_name``: the name contains it, in any case; it filters the list too and keeps the other parameters)
    and links to the first rows whose name matches. The rows come from the related model's manager, which holds
    the request's tenant scope, so a reviewer is offered only their tenants' rows. Django's parameters
    (``<field>__id__exact``, ``<field>__isnull``) keep working, and the row chosen is listed even when it is not
    among the first."""

    search_field = "name"
    search_suffix = "_name"
    search_lookup = "__name__icontains"

    def related_rows(self, field, request, model_admin):
        """The rows the filter may link to."""
        return field.remote_field.model._default_manager.complex_filter(field.get_limit_choices_to())

    def field_choices(self, field, request, model_admin):
        key = field.target_field
        rows = self.related_rows(field, request, model_admin)
        named = rows.filter(**{f"{self.search_field}__icontains": self.search_value}) if self.search_value else rows
        ordering = self.field_admin_ordering(field, request, model_admin) or (self.search_field,)
        choices = list(named.order_by(*ordering).values_list(key.attname, self.search_field)[: FILTER_CHOICES_MAX + 1])
        self.truncated = len(choices) > FILTER_CHOICES_MAX
        choices = choices[:FILTER_CHOICES_MAX]
        listed = {str(pk) for pk, _ in choices}
        chosen = []
        for value in self.lookup_val or []:
            try:
                chosen.append(key.to_python(value))
            except ValidationError:
                continue  # not a key: the list answers it as Django's filter would
        chosen = [pk for pk in chosen if str(pk) not in listed]
        if chosen:
            choices += list(rows.filter(**{f"{key.attname}__in": chosen}).values_list(key.attname, self.search_field))
        return choices


class BoundedRelatedOnlyFilter(BoundedRelatedFilter):
    """A bounded filter by the related rows that the list's own rows name (Django's ``RelatedOnlyFieldListFilter``,
    which reads every row of the list for them): each related row is tested for a list row that names it, through
    the foreign key's index, so the cost follows the related table (reviewers, say), not the list (their decisions)."""

    def related_rows(self, field, request, model_admin):
        named = model_admin.get_queryset(request).filter(**{field.name: OuterRef("pk")})
        return super().related_rows(field, request, model_admin).filter(Exists(named))


class BoundedValuesFilter(_SearchWhenMany, admin.AllValuesFieldListFilter):
    """Django's filter by the values of a field (a verb's name), at most ``FILTER_CHOICES_MAX`` of them; beyond, a
    search (``<field>_contains``: the value contains it, in any case) filters the list and the values listed."""

    search_suffix = "_contains"
    search_lookup = "__icontains"

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        values = self.lookup_choices
        if self.search_value:
            values = values.filter(**{f"{field.name}__icontains": self.search_value})
        values = list(values[: FILTER_CHOICES_MAX + 1])
        self.truncated = len(values) > FILTER_CHOICES_MAX
        values = values[:FILTER_CHOICES_MAX]
        self.lookup_choices = values + [v for v in self.lookup_val or [] if v not in {str(x) for x in values}]


class TopValuesFilter(admin.AllValuesFieldListFilter):
    """Django's filter by the values of a text field, offering the ``limit`` most frequent among the newest
    ``sample`` rows: the distinct values of a large table's column would be read from every row on each page view.
    Any value still filters through the URL (``?<field>=<value>``), and a value chosen is listed."""

    limit = 30
    sample = 5_000  # rows read per filter and page view (a row may carry its vector)

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        parent_model, _ = reverse_field_path(model, field_path)
        if parent_model is model:
            queryset = model_admin.get_queryset(request)  # the reviewer's scope, as Django's filter
        else:
            queryset = parent_model._default_manager.all()
        newest = queryset.order_by("-pk").values("pk")[: self.sample]
        rows = (
            queryset.filter(pk__in=Subquery(newest))
            .exclude(**{f"{field.name}__isnull": True})
            .exclude(**{field.name: ""})
            .values_list(field.name)
            .annotate(n=Count("pk"))
            .order_by("-n", field.name)[: self.limit]
        )
        values = [str(value) for value, _ in rows]
        self.lookup_choices = values + [v for v in self.lookup_val or [] if v not in values]


def pretty_json(value) -> str:
    if value is None:
        return "—"
    return format_html(
        '<pre style="white-space:pre-wrap;max-width:60em;margin:0">{}</pre>',
        json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str),
    )


class JsonObjectField(forms.JSONField):
    """A JSON text area that must hold an object, under the API's input policy (``common.parsers.json_loads_checked``:
    no NaN, no integer past 64 bits, no NUL or lone surrogate, a bounded depth): a form error, never a 500."""

    def __init__(self, **kwargs):
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 8, "cols": 80, "style": "font-family:monospace"}))
        super().__init__(**kwargs)

    def to_python(self, value):
        if self.disabled or value in self.empty_values or not isinstance(value, str):
            return super().to_python(value)
        try:
            return json_loads_checked(value)
        except RefusedValue as exc:
            where = "" if exc.field == "body" else f" (at {exc.field[:100]})"
            raise forms.ValidationError(f"{exc.reason}{where}", code="invalid") from None
        except TooDeep as exc:
            raise forms.ValidationError(str(exc.detail), code="invalid") from None
        except ParseError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value}) from None

    def bound_data(self, data, initial):
        """The text as posted, shown again as it was when it cannot be parsed (Django's parses it again, unguarded)."""
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return json_loads_checked(data)
        except ParseError:  # TooDeep and RefusedValue are ParseErrors too
            return forms.fields.InvalidJSONInput(data)

    def validate(self, value):
        super().validate(value)
        if value is not None and not isinstance(value, dict):
            raise forms.ValidationError('Enter a JSON object, e.g. {"to": "a@example.com"}.')


def run_bulk(modeladmin, request, queryset, fn, done: str) -> None:
    """Call a service for each selected row; report successes and refusals separately."""
    ok, refused = 0, []
    for obj in queryset:
        try:
            fn(obj)
            ok += 1
        except ApplicationError as exc:
            refused.append(f"#{obj.pk}: {exc.message}")
    if ok:
        modeladmin.message_user(request, f"{done}: {ok}.", messages.SUCCESS)
    if refused:
        modeladmin.message_user(request, "Refused — " + "; ".join(refused[:10]), messages.WARNING)


def rounded(field: str, places: int = 2, *, description: str | None = None):
    """A list_display column showing a float field rounded (no 0.9974999999999999 in a changelist)."""

    def column(obj):
        value = getattr(obj, field)
        return "—" if value is None else f"{value:.{places}f}"

    column.short_description = description or field.replace("_", " ")
    column.admin_order_field = field
    return column


def signal_direction(obj) -> str:
    """A signal for or against its verb, in words (a negative signal is no green tick)."""
    return "✗ against" if obj.is_negative else "✓ for"


signal_direction.short_description = "direction"
signal_direction.admin_order_field = "is_negative"


def revert_link(kind: str):
    """A read-only field with the link to revert the object (a confirmation with a reason: review.admin.revert_view)."""

    def column(obj):
        if obj is None or obj.pk is None:
            return "—"
        return format_html('<a class="button" href="{}">Revert…</a>', reverse("review-revert", args=[kind, obj.pk]))

    column.short_description = "revert"
    return column


def confirm_bulk(
    modeladmin,
    request,
    queryset,
    *,
    describe,
    apply,
    done: str,
    submit: str,
    reason_required: bool = False,
    ask_reason: bool = True,
    intro: str | None = None,
):
    """A bulk action behind a confirmation that lists each item and what will change for it; applied on "post".

    ``describe(obj)`` says the change for one item; ``apply(obj, reason)`` makes it through the app's service
    (``reason`` is "" when ``ask_reason`` is False); ``intro`` replaces the page's first sentence."""
    from django.contrib.admin import helpers
    from django.template.response import TemplateResponse

    rows = list(queryset)
    error = ""
    if request.POST.get("post") == "yes":
        reason = request.POST.get("reason", "").strip()
        if reason or not reason_required:
            run_bulk(modeladmin, request, queryset, lambda obj: apply(obj, reason), done)
            return None
        error = "Give a reason."
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Confirm: {submit.lower()} {len(rows)} {opts.verbose_name_plural}",
        "intro": intro or f"Each of these {len(rows)} {opts.verbose_name_plural} changes as listed.",
        "opts": opts,
        "rows": [(obj, describe(obj)) for obj in rows],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "action_name": request.POST.get("action", ""),
        "ask_reason": ask_reason,
        "reason_required": reason_required,
        "submit": f"Yes, {submit.lower()} {len(rows)}",
        "error": error,
        "media": modeladmin.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/bulk_confirmation.html", context)


# The rows a read-only inline shows at most: a memory folded thousands of observations, a long run logged thousands of
# events; the page shows the newest (its heading says so).
INLINE_ROWS_MAX = 50


class NewestRowsFormSet(BaseInlineFormSet):
    """A read-only inline's rows: the newest ``INLINE_ROWS_MAX`` of the parent's (by ``newest_by``), in the inline's
    ordering."""

    newest_by = "-pk"

    def get_queryset(self):
        if not hasattr(self, "_newest"):
            rows = super().get_queryset()
            newest = rows.order_by(self.newest_by).values("pk")[:INLINE_ROWS_MAX]
            self._newest = rows.filter(pk__in=Subquery(newest))
        return self._newest


def newest_rows_formset(newest_by: str) -> type[NewestRowsFormSet]:
    return type("NewestRowsFormSet", (NewestRowsFormSet,), {"newest_by": newest_by})
