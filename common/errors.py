"""The console's own error pages (400, 403, 404, 500, CSRF failure) and its icon; under /api/ the API's
JSON errors instead (common/api.py's format, with the request id), never an HTML page.

Django's defaults would render our 403.html / 404.html / 500.html too; these handlers exist so that a
CSRF failure gets the same styled 403 page with words a person understands, and so that every refusal
is one log line (see `common.log`), never Django's technical page or a traceback.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.http import FileResponse, HttpResponseForbidden, JsonResponse
from django.template import loader
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET
from django.views.defaults import bad_request, page_not_found, permission_denied, server_error

from common import requestid

FAVICON = Path(settings.BASE_DIR) / "static" / "favicon.ico"

CSRF_MESSAGE = ("This form could not be sent: it had expired or came from another page. "
                "Reload the page and try again.")


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def api_error(request, status: int, detail: str) -> JsonResponse:
    """An error of the API in its format (common/api.py), with the request's id."""
    return JsonResponse({"detail": detail, "request_id": requestid.of(request)}, status=status)


def handler400(request, exception=None):
    if _is_api(request):
        return api_error(request, 400, "Bad request: the request could not be read (its host, headers or body).")
    return bad_request(request, exception, template_name="400.html")


def handler403(request, exception=None):
    if _is_api(request):
        message = str(exception) if exception is not None and str(exception) else "Your role does not allow this."
        return api_error(request, 403, message)
    return permission_denied(request, exception, template_name="403.html")


def handler404(request, exception=None):
    if _is_api(request):
        return api_error(request, 404, f"Not found: {request.path[:200]} is no address of the API (see /api/docs/).")
    return page_not_found(request, exception, template_name="404.html")


def handler500(request):
    if _is_api(request):
        # The traceback is in the log (django.request, with this request_id); the answer says no more.
        request_id = requestid.of(request)
        return JsonResponse({"detail": "The server failed to answer this request: the error is logged as request "
                                       f"{request_id}. Nothing was stored; try again, or give the id to an administrator.",
                             "request_id": request_id}, status=500)
    # 500.html stands alone (no request context, no database): whatever failed may fail again.
    return server_error(request, template_name="500.html")


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: the styled 403 page; the reason goes to the log (django.security.csrf), not the page."""
    if _is_api(request):
        return api_error(request, 403, CSRF_MESSAGE)
    template = loader.get_template("403.html")
    return HttpResponseForbidden(template.render({"exception": CSRF_MESSAGE}, request))


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    # Browsers ask for /favicon.ico whatever the page says; the same file as static/favicon.ico.
    return FileResponse(FAVICON.open("rb"), content_type="image/vnd.microsoft.icon")
