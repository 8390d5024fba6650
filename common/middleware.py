"""The input policy for what reaches a view outside a JSON body: the path, the query string and form fields.

A NUL byte or a lone surrogate in the path, a query parameter, or the name or value of a form field (a
form-encoded or multipart POST outside ``/api/`` and ``/mcp``) is refused with 400 (in the API's error shape
under ``/api/``) before any view, form or query sees it: PostgreSQL cannot store or compare them. JSON bodies
are the API parser's (``common.parsers``). A date part in a query parameter (``created_at__year=99999999``, which
the admin's date filters take) must be a date Python can hold, and its next year, month or day too: Django would
fail on it while building the query. A day must exist in its month.
The rows an admin action is asked to run on (``_selected_action``) must be ids, whole numbers a key can hold (every
model's key here is one): Django's own admin fails on any other while filtering the selection.
"""

from datetime import date

from django.conf import settings
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import TooManyFieldsSent
from django.http import HttpResponseBadRequest, JsonResponse

from common.parsers import text_problem

FORM_CONTENT_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# The admin's date hierarchy filters up to the next year, month or day, so the last year Python holds is out of reach.
DATE_PART_RANGES = {"__year": (1, 9998), "__month": (1, 12), "__day": (1, 31)}
NO_FORM_PREFIXES = ("/api/", "/mcp")
KEY_MAX = 2**63 - 1  # PostgreSQL's bigint


class InputPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = _problem(request) or _form_problem(request)
        if problem is None:
            return self.get_response(request)
        field, reason = problem
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": f"{field}: {reason}", "code": "invalid", "fields": {field: [reason]}}, status=400)
        return HttpResponseBadRequest(f"{field}: {reason}", content_type="text/plain; charset=utf-8")


def _problem(request) -> tuple[str, str] | None:
    problem = text_problem(request.path)
    if problem:
        return "path", f"The path {problem}."
    try:
        query = request.GET.lists()
    except TooManyFieldsSent:
        return "query", f"More than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters (DATA_UPLOAD_MAX_NUMBER_FIELDS)."
    return _pairs_problem(query, kind="query", noun="parameter", also=_date_part_problem) or _date_problem(request.GET)


def _date_problem(query) -> tuple[str, str] | None:
    """A year, month and day (each in range) that make no date together: ``created_at__month=2&created_at__day=30``."""
    for key in query:
        if key.endswith("__day"):
            field = key.removesuffix("__day")
            year, month = query.get(f"{field}__year", "2000"), query.get(f"{field}__month", "1")
            try:
                date(int(year), int(month), int(query[key]))
            except ValueError:
                return key[:100], "Expected a day that exists in that month."
    return None


def _pairs_problem(lists, *, kind: str, noun: str, also=None) -> tuple[str, str] | None:
    """The first name or value of a query string or a form that the policy (or ``also(key, value)``) refuses."""
    for key, values in lists:
        problem = text_problem(key)
        if problem:
            return kind, f"A {noun} name {problem}."
        for value in values:
            problem = text_problem(value)
            if problem:
                return key[:100], f"The {noun} {problem}."
            problem = also(key, value) if also else None
            if problem:
                return key[:100], problem
    return None


def _date_part_problem(key: str, value: str) -> str | None:
    for suffix, (low, high) in DATE_PART_RANGES.items():
        if key.endswith(suffix):
            if not (value.isascii() and value.isdecimal() and len(value) <= 4 and low <= int(value) <= high):
                return f"Expected a whole number from {low} to {high}."
    return None


def _selection_problem(key: str, value: str) -> str | None:
    if key == ACTION_CHECKBOX_NAME:
        digits = value.strip()
        if not (digits.isascii() and digits.isdecimal() and int(digits) <= KEY_MAX):
            return f"The selection holds {value[:40]!r}, which is not the id of a row."
    return None


def _form_problem(request) -> tuple[str, str] | None:
    """The first form field whose name or value the policy refuses (form-encoded and multipart POSTs only)."""
    if request.method != "POST" or request.path.startswith(NO_FORM_PREFIXES):
        return None
    if request.content_type not in FORM_CONTENT_TYPES:
        return None
    try:
        form = request.POST.lists()
    except (LookupError, UnicodeError):  # a charset that names no text encoding, or cannot decode the body
        return "form", "The body cannot be read in the charset its Content-Type names."
    except TooManyFieldsSent:
        return "form", f"More than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields (DATA_UPLOAD_MAX_NUMBER_FIELDS)."
    problem = _pairs_problem(form, kind="form", noun="field", also=_selection_problem)
    if problem:
        return problem
    for key, files in request.FILES.lists():
        problem = text_problem(key)
        if problem:
            return "form", f"A field name {problem}."
        for upload in files:
            problem = text_problem(upload.name or "")
            if problem:
                return key[:100], f"The file name {problem}."
    return None
