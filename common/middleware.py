"""The input policy for what reaches a view outside a JSON body: the path and the query string.

A NUL byte or a lone surrogate in either is refused with 400 (in the API's error shape under
``/api/``) before any view, form or query sees it: PostgreSQL cannot store or compare them.
"""

from django.http import HttpResponseBadRequest, JsonResponse

from common.parsers import text_problem


class InputPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = _problem(request)
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
    for key, values in request.GET.lists():
        problem = text_problem(key)
        if problem:
            return "query", f"A parameter name {problem}."
        for value in values:
            problem = text_problem(value)
            if problem:
                return key, f"The parameter {problem}."
    return None
