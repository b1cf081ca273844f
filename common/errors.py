"""The console's own error pages (403, 404, 500, CSRF failure) and its icon.

Django's defaults would render our 403.html / 404.html / 500.html too; these handlers exist so that a
CSRF failure gets the same styled 403 page with words a person understands, and so that every refusal
is one log line (see `common.log`), never Django's technical page or a traceback.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.http import FileResponse, HttpResponseForbidden
from django.template import loader
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found, permission_denied, server_error

FAVICON = Path(settings.BASE_DIR) / "static" / "favicon.ico"

CSRF_MESSAGE = ("This form could not be sent: it had expired or came from another page. "
                "Reload the page and try again.")


def handler403(request, exception=None):
    return permission_denied(request, exception, template_name="403.html")


def handler404(request, exception=None):
    return page_not_found(request, exception, template_name="404.html")


def handler500(request):
    # 500.html stands alone (no request context, no database): whatever failed may fail again.
    return server_error(request, template_name="500.html")


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: the styled 403 page; the reason goes to the log (django.security.csrf), not the page."""
    template = loader.get_template("403.html")
    return HttpResponseForbidden(template.render({"exception": CSRF_MESSAGE}, request))


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    # Browsers ask for /favicon.ico whatever the page says; the same file as static/favicon.ico.
    return FileResponse(FAVICON.open("rb"), content_type="image/vnd.microsoft.icon")
