"""The review inbox in the admin: one queue of everything that waits for a human, and a decision page per item.

Plain views behind ``admin.site.admin_view`` (the admin's login, staff check and CSRF); the permissions are the
models' own (view to see a kind, the decide permission of the kind to decide it). Reads go through
``review.selectors``, decisions through ``review.services``.
"""

import functools

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from common.admin import BoundedRelatedFilter, BoundedRelatedOnlyFilter, TopValuesFilter
from common.api import ApplicationError, NotFound
from review import selectors, services
from review.models import Decision, Kind

SESSION_FILTERS = "review_inbox_filters"
SESSION_SKIPPED = "review_inbox_skipped"
RISKS = {"": 0, "medium": 1, "high": 2}
MAX_PAGE = 10_000  # beyond it a page would ask the database for more rows than a LIMIT holds


def _number(value: str) -> int | None:
    """A whole number written in ASCII digits (at most 18, so it fits a bigint), else None ("²" or "٣" too)."""
    return int(value) if value.isascii() and value.isdecimal() and len(value) <= 18 else None


def _filters_from(params) -> selectors.InboxFilters:
    kinds = [k for k in params.getlist("kind") if k in Kind.values]
    age = _number(params.get("age", ""))
    return selectors.InboxFilters(
        kinds=kinds,
        max_age_days=age if age and age <= 3650 else None,
        min_risk=RISKS.get(params.get("risk", ""), 0),
        agent=params.get("agent", "").strip()[:120],
        tenant_id=_number(params.get("tenant", "")),
        order="risk" if params.get("order") == "risk" else "oldest",
    )


def _filters_session(request) -> selectors.InboxFilters:
    raw = request.session.get(SESSION_FILTERS) or {}
    return selectors.InboxFilters(**raw) if raw else selectors.InboxFilters()


def inbox_view(request):
    filters = _filters_from(request.GET)
    request.session[SESSION_FILTERS] = filters.__dict__
    request.session[SESSION_SKIPPED] = []
    page_number = _number(request.GET.get("page", "1"))
    data = selectors.inbox_page(
        user=request.user,
        filters=filters,
        page=min(page_number, MAX_PAGE) if page_number else 1,
        per_page=settings.REVIEW_PAGE_SIZE,
    )
    context = {
        **admin.site.each_context(request),
        "title": "Review inbox",
        "data": data,
        "filters": filters,
        "kind_choices": [(s.kind, s.label, data["counts"].get(s.kind, 0)) for s in data["kinds"]],
        "progress": selectors.progress(),
        "tenants": request.user.tenant_memberships.select_related("tenant") if not request.user.is_superuser else None,
        "now": timezone.now(),
    }
    return render(request, "review/inbox.html", context)


def decide_view(request, kind: str, pk: int):
    spec = selectors.kind_spec(kind)
    if spec is None or not request.user.has_perm(spec.view_perm):
        raise Http404("No such item.")
    obj = selectors.item_get(kind=kind, pk=pk)
    if obj is None:
        raise Http404("No such item.")
    if request.method == "POST":
        return _decide_post(request, spec, obj)
    return _decide_page(request, spec, obj)


def _decide_page(request, spec, obj, *, status: int = 200, form: dict | None = None):
    waiting = selectors.item_is_waiting(kind=spec.kind, pk=obj.pk)
    claim = None
    held_by = None
    may_decide = request.user.has_perm(spec.decide_perm)
    if waiting:  # only a reviewer who may decide holds the item; a viewer only sees who does
        if may_decide:
            claim = services.claim_take(kind=spec.kind, object_id=obj.pk, tenant_id=obj.tenant_id, user=request.user)
        if claim is None:
            held_by = selectors.claim_live(kind=spec.kind, object_id=obj.pk)
    title, detail, agent = selectors.describe(spec.kind, obj)
    last = None if waiting else selectors.last_decision(kind=spec.kind, object_id=obj.pk)
    context = {
        **admin.site.each_context(request),
        "title": title,
        "spec": spec,
        "obj": obj,
        "detail": detail,
        "agent": agent,
        "waiting": waiting,
        "claim": claim,
        "held_by": held_by,
        "last": last,
        "can_decide": waiting and held_by is None and may_decide,
        "evidence": selectors.item_evidence(spec.kind, obj),
        "categories": selectors.mistake_categories(),
        "form": form or {},
        "change_url": _change_url(spec.kind, obj),
    }
    return render(request, f"review/decide_{spec.kind}.html", context, status=status)


def _decide_post(request, spec, obj):
    action = request.POST.get("action", "")
    key = (spec.kind, obj.pk)
    if action == "skip":
        services.claim_release(kind=spec.kind, object_id=obj.pk, user=request.user)
        skipped = request.session.get(SESSION_SKIPPED, [])
        request.session[SESSION_SKIPPED] = [*skipped, list(key)][-500:]
        return _to_next(request, after=key)
    if action not in Decision.Verdict.values:
        messages.error(request, "Choose approve, reject or skip.")
        return _decide_page(request, spec, obj, status=400)
    form = {
        "category": request.POST.get("category", ""),
        "reason": request.POST.get("reason", ""),
        "acknowledged": request.POST.get("acknowledged") == "1",
    }
    confirmed = request.POST.get("confirmed") == "1"
    # Decided already: straight to the service, which says by whom and when (no confirmation of a change that
    # cannot happen).
    waiting = selectors.item_is_waiting(kind=spec.kind, pk=obj.pk)
    # Similar pending candidates with the same verb, decided together with this one (the confirmation lists each).
    together = []
    if waiting and spec.kind == Kind.CANDIDATE:
        wanted = {n for x in request.POST.getlist("together") if (n := _number(x)) is not None and n != obj.pk}
        together = [d for d in selectors.candidate_duplicates(obj) if d.pk in wanted]
    if (
        waiting
        and spec.kind == Kind.CANDIDATE
        and action == Decision.Verdict.APPROVE
        and not form["acknowledged"]
        and selectors.item_conflicts(spec.kind, obj)
    ):  # said before the confirmation page, not after it
        messages.error(request, services.CONFLICT_UNACKNOWLEDGED)
        return _decide_page(request, spec, obj, status=400, form=form)
    if waiting and action == Decision.Verdict.APPROVE and spec.confirm_approve and not confirmed:
        context = {
            **admin.site.each_context(request),
            "title": "Confirm the change",
            "spec": spec,
            "obj": obj,
            "statement": services.change_statement_compose(kind=spec.kind, obj=obj, verdict=action),
            "together": [(d, services.change_statement_compose(kind=spec.kind, obj=d, verdict=action)) for d in together],
            "action": action,
            "form": form,
        }
        return render(request, "review/confirm.html", context)

    def decide(object_id: int):
        return services.item_decide(
            kind=spec.kind,
            object_id=object_id,
            user=request.user,
            verdict=action,
            category=form["category"],
            reason=form["reason"],
            acknowledged=form["acknowledged"],
            confirmed=confirmed,
        )

    try:
        decision = decide(obj.pk)
    except NotFound:
        raise Http404("No such item.")
    except ApplicationError as exc:  # claimed, decided already, no permission, not confirmed, refused
        messages.error(request, exc.message)
        return _decide_page(request, spec, obj, status=exc.status_code, form=form)
    messages.success(request, f"{decision.get_verdict_display().capitalize()}: {decision.summary}")
    for other in together:
        try:
            decide(other.pk)
            messages.success(
                request, f"Also {decision.get_verdict_display()}: “{other.input_pattern}” → {other.suggested_output}."
            )
        except ApplicationError as exc:
            messages.warning(request, f"“{other.input_pattern}” → {other.suggested_output} was not decided: {exc.message}")
    return _to_next(request, after=key)


def _to_next(request, *, after):
    skipped = {tuple(k) for k in request.session.get(SESSION_SKIPPED, [])}
    item = selectors.next_item(user=request.user, filters=_filters_session(request), after=after, skip=skipped)
    if item is None:
        messages.info(request, "Nothing else waits in this view of the inbox.")
        return redirect("review-inbox")
    return redirect("review-decide", kind=item.kind, pk=item.pk)


def _change_url(kind, obj) -> str:
    opts = obj._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    except NoReverseMatch:  # a kind without an admin page
        return ""


def revert_view(request, kind: str, pk: int):
    """Revert a learned phrase, a block, a correction rule or an action's level: a confirmation with a reason."""
    perm = selectors.REVERT_PERMS.get(kind)
    if perm is None:
        raise Http404("Nothing to revert.")
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"Reverting needs the permission {perm}.")
    obj = selectors.revert_target(kind, pk)
    if obj is None:
        raise Http404("Nothing to revert.")
    back = _change_url(kind, obj)
    error = ""
    if request.method == "POST":
        try:
            statement = services.revert_apply(
                kind=kind,
                obj=obj,
                user=request.user,
                reason=request.POST.get("reason", ""),
                # a version that is no number names nothing the page showed: 0 matches none (refused, not skipped)
                revert_of=_number(request.POST["revert_of"]) or 0 if request.POST.get("revert_of") else None,
            )
        except NotFound:
            raise Http404("Nothing to revert.")
        except ApplicationError as exc:
            error, status = exc.message, exc.status_code
        else:
            messages.success(request, f"Reverted: {statement}")
            return redirect(back or "review-inbox")
    else:
        status = 200
    context = {
        **admin.site.each_context(request),
        "title": "Confirm the revert",
        "obj": obj,
        "statement": selectors.revert_statement(kind, obj),
        "revert_of": selectors.revert_of(kind, obj),
        "back": back,
        "error": error,
        "reason": request.POST.get("reason", ""),
    }
    return render(request, "review/revert.html", context, status=status)


class ReviewerFilter(BoundedRelatedOnlyFilter):
    """The reviewers who decided something the list holds; beyond the first ones, a search by user name."""

    search_field = "username"
    search_lookup = "__username__icontains"


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    """The inbox's decision log: who decided what, when and why (read-only)."""

    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_select_related = ["user", "agent"]
    list_display = ["decided_at", "user", "agent", "kind", "object_id", "verdict", "category", "summary"]
    list_filter = [
        "kind",
        "verdict",
        ("category", TopValuesFilter),
        ("user", ReviewerFilter),
        ("agent", BoundedRelatedFilter),
    ]
    search_fields = ["summary", "reason", "user__username", "agent__name"]
    date_hierarchy = "decided_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- Decisions taken in the apps' own admin pages ---
#
# Every kind of item the inbox shows can also be decided on its app's admin pages: a changelist's bulk action, a
# change form, a one-click button. Those pages call the same services as the inbox; here they also honour the
# inbox's claims (an item another reviewer holds is refused) and log each decision they take as a ``Decision``,
# in the same transaction as the change, so the decision log and the inbox's progress count every decision.

_OBJECT_VIEWS = {Kind.RULE: ["deactivate_view"]}  # one-click views with the item's id as their argument


def _posted(request, *names) -> str:
    return next((request.POST.get(n, "") for n in names if request.POST.get(n)), "")


def _admin_decisions_logged(kind: str, view, ids_of, may_see, refused_to=None):
    """``view`` (a bound admin view) with the inbox's claims honoured and its decisions logged. A refusal goes back
    to ``refused_to(request)`` (a page that answers GET), else to the page posted to. A user who may not see the
    items (``may_see(request)`` false) goes straight to the view, which refuses them without naming who holds what."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        ids = ids_of(request, args, kwargs) if request.method == "POST" and may_see(request) else None
        if not ids:
            return view(request, *args, **kwargs)
        with transaction.atomic():
            held = services.items_hold_for_admin(kind=kind, ids=ids, user=request.user)
            if held:
                names = "; ".join(
                    f"#{c.object_id} held by {c.user.get_username()} until {timezone.localtime(c.expires_at):%H:%M}"
                    for c in held[:10]
                )
                more = f" and {len(held) - 10} more" if len(held) > 10 else ""
                messages.error(
                    request,
                    f"Nothing was decided: another reviewer holds it in the inbox: {names}{more}. "
                    "Leave what they hold out of the selection, or decide it once they let go.",
                )
                return HttpResponseRedirect(refused_to(request) if refused_to else request.get_full_path())
            waiting = selectors.items_waiting(kind=kind, ids=ids)
            response = view(request, *args, **kwargs)
            if waiting:
                services.admin_decisions_record(
                    kind=kind,
                    waiting=waiting,
                    user=request.user,
                    reason=_posted(request, "reason", "notes", "review_notes"),
                    category=_posted(request, "category", "mistake_category"),
                )
        return response

    return wrapped


def _changelist_ids(spec, model_admin):
    """The waiting items a changelist's action acts on, read as the admin reads them: the selected ids as its query
    converts them, or, for "select all", every row of the list as filtered and searched."""

    def ids_of(request, args, kwargs) -> list[int]:
        # any action named: the changelist has one action menu above and one below, and Django runs the one
        # ``index`` points at, whichever menu the last "action" value came from
        if not any(request.POST.getlist("action")):
            return []
        if request.POST.get("select_across") == "1":
            try:
                rows = model_admin.get_changelist_instance(request).get_queryset(request).values("pk")
            except IncorrectLookupParameters:  # the view answers a bad filter itself and runs no action
                return []
        else:
            rows = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        try:
            return list(spec.waiting().filter(pk__in=rows).order_by("pk").values_list("pk", flat=True))
        except (ValueError, TypeError, ValidationError):  # the view refuses these ids the same way
            return []

    return ids_of


def _object_ids(spec):
    """The waiting item a change form or a one-click view acts on, its id read as the admin reads it."""

    def ids_of(request, args, kwargs) -> list[int]:
        value = kwargs.get("object_id", kwargs.get("pk", args[0] if args else None))
        if value is None:
            return []
        try:
            return list(spec.waiting().filter(pk=unquote(str(value))).values_list("pk", flat=True))
        except (ValueError, TypeError, ValidationError):
            return []

    return ids_of


def admin_decisions_install(site=admin.site) -> None:
    """Wrap the decision pages of every kind's registered admin (called once, when the admin is loaded)."""
    for kind, spec in selectors.KINDS.items():
        try:
            model_admin = site.get_model_admin(spec.waiting().model)
        except NotRegistered:
            continue
        if getattr(model_admin, "_decisions_logged", False):
            continue
        opts = model_admin.model._meta
        changelist = f"admin:{opts.app_label}_{opts.model_name}_changelist"
        may_see = model_admin.has_view_or_change_permission
        model_admin.changelist_view = _admin_decisions_logged(
            kind, model_admin.changelist_view, _changelist_ids(spec, model_admin), may_see
        )
        model_admin.changeform_view = _admin_decisions_logged(kind, model_admin.changeform_view, _object_ids(spec), may_see)
        for name in _OBJECT_VIEWS.get(kind, []):  # POST-only views: a refusal goes back to the list
            setattr(
                model_admin,
                name,
                _admin_decisions_logged(
                    kind,
                    getattr(model_admin, name),
                    _object_ids(spec),
                    may_see,
                    lambda request, name=changelist, site=site: reverse(name, current_app=site.name),
                ),
            )
        model_admin._decisions_logged = True


admin_decisions_install()
