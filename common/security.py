"""Hardening that is not an access rule: the login lockout's rules, on django-axes.

The Content-Security-Policy is django-csp's (settings.CONTENT_SECURITY_POLICY). Axes counts failed
log-ins per (username, address) in the database (shared by every web process) and refuses a locked-out
pair before the password is even checked; what is ours is only which address and username count and
what the refusal looks like.
"""
from __future__ import annotations

import datetime

from axes.backends import AxesStandaloneBackend
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.forms.utils import ErrorDict
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from common.words import noun


def client_address(request) -> str:
    """AXES_CLIENT_IP_CALLABLE. REMOTE_ADDR only: X-Forwarded-For is set by whoever sends the request, so
    it cannot be trusted for throttling (behind a proxy, every client shares the proxy's budget per username)."""
    return request.META.get("REMOTE_ADDR", "")


def normal_username(username: str | None) -> str:
    return (username or "").strip().lower()


def login_username(request, credentials: dict | None) -> str:
    """AXES_USERNAME_CALLABLE: "RND-admin " and "rnd-admin" are one username's failures."""
    username = (credentials or {}).get("username")
    if username is None and request is not None:
        username = request.POST.get("username", "")
    return normal_username(username)


def failure_limit(request, credentials) -> int:
    """AXES_FAILURE_LIMIT: read at each log-in, so that LOGIN_FAILURE_LIMIT stays the one setting."""
    return settings.LOGIN_FAILURE_LIMIT


def failure_window(request) -> datetime.timedelta:
    """AXES_COOLOFF_TIME, from LOGIN_FAILURE_WINDOW (seconds)."""
    return datetime.timedelta(seconds=settings.LOGIN_FAILURE_WINDOW)


class LoginLockoutBackend(AxesStandaloneBackend):
    """Axes' lockout check for log-ins through a request (the login page). `authenticate()` called
    without one (a script, a shell) has no address to count and goes straight to the next backend."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE. The failure that reaches the limit is answered like every failure before
    it ("didn't match"); from then on the pair is refused, even with the right password, with a 429."""
    if not isinstance(original_response, HttpResponse):
        # Axes' async path (Daphne) passes (request, credentials) only.
        credentials = original_response if isinstance(original_response, dict) else credentials
        original_response = None
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    form = AuthenticationForm(request, initial={"username": username})
    context = {"form": form, "next": request.POST.get("next", request.GET.get("next", ""))}
    if getattr(request, "axes_failures_since_start", None):  # counted just now: not refused yet
        if original_response is not None:
            return original_response
        form._errors = ErrorDict({"__all__": form.error_class([form.get_invalid_login_error()])})
        return render(request, "registration/login.html", context)
    minutes = max(1, settings.LOGIN_FAILURE_WINDOW // 60)
    context["throttled"] = (
        f"Too many failed log-in attempts for this username from your address. Try again in up to "
        f"{minutes} {noun(minutes, 'minute')}, or ask an administrator to reset your password."
    )
    return render(request, "registration/login.html", context, status=429)


# Reading and clearing the count (tests, an administrator's shell; the Django admin lists them too).

def login_failures(username: str, address: str) -> int:
    """Failed log-ins of this username from this address still counting (within the window)."""
    since = timezone.now() - datetime.timedelta(seconds=settings.LOGIN_FAILURE_WINDOW)
    attempts = AccessAttempt.objects.filter(username=normal_username(username), ip_address=address,
                                            attempt_time__gte=since)
    return sum(a.failures_since_start for a in attempts)


def login_failures_reset(username: str, address: str) -> None:
    reset(ip=address, username=normal_username(username))
