"""Error pages: API paths answer the API's JSON error shape, other paths Django's pages."""

from django.http import JsonResponse
from django.views import defaults


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse({"detail": "Not found.", "code": "not_found", "fields": {}}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        return JsonResponse({"detail": "Internal error; it has been logged.", "code": "server_error", "fields": {}}, status=500)
    return defaults.server_error(request)


def bad_request(request, exception=None):
    if _is_api(request):
        return JsonResponse({"detail": "Bad request.", "code": "bad_request", "fields": {}}, status=400)
    return defaults.bad_request(request, exception)
