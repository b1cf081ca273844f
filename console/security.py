"""Hardening that is not an access rule: the Content-Security-Policy header and login throttling."""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache


class ContentSecurityPolicyMiddleware:
    """Adds `settings.CONTENT_SECURITY_POLICY` to every response that does not set its own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", "")
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response


def client_address(request) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is set by whoever sends the request, so it cannot be trusted
    # for throttling (behind a proxy, every client shares the proxy's budget per username).
    return request.META.get("REMOTE_ADDR", "")


def _failure_key(username: str, address: str) -> str:
    digest = hashlib.sha256(f"{username.strip().lower()}\0{address}".encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


def login_failures(username: str, address: str) -> int:
    return cache.get(_failure_key(username, address), 0)


def login_failure_record(username: str, address: str) -> int:
    """Count one failed login; the window starts at the first failure and is not extended."""
    key = _failure_key(username, address)
    if cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW)
        return 1


def login_failures_reset(username: str, address: str) -> None:
    cache.delete(_failure_key(username, address))


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view, refusing a username from an address after too many recent failures."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        address = client_address(request)
        if login_failures(username, address) >= settings.LOGIN_FAILURE_LIMIT:
            minutes = max(1, settings.LOGIN_FAILURE_WINDOW // 60)
            form = self.get_form()
            message = (
                f"Too many failed log-in attempts for this username from your address. Try again in up to "
                f"{minutes} minutes, or ask an administrator to reset your password."
            )
            response = self.render_to_response(self.get_context_data(form=form, throttled=message))
            response.status_code = 429
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        login_failure_record(self.request.POST.get("username", ""), client_address(self.request))
        return super().form_invalid(form)

    def form_valid(self, form):
        login_failures_reset(self.request.POST.get("username", ""), client_address(self.request))
        return super().form_valid(form)
