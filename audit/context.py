"""Through what a write happens (page, API, sync, command), carried by a context variable.

The middleware marks every HTTP request as "page"; the API marks its views "api"; the sync marks its
work "sync"; anything else (management commands, the shell) is a "command".
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

PAGE, API, SYNC, COMMAND = "page", "api", "sync", "command"
CHANNELS = (PAGE, API, SYNC, COMMAND)

_via: contextvars.ContextVar[str] = contextvars.ContextVar("audit_via", default=COMMAND)


def current_via() -> str:
    return _via.get()


@contextlib.contextmanager
def via(channel: str) -> Iterator[None]:
    if channel not in CHANNELS:
        raise ValueError(f"unknown audit channel {channel!r}")
    token = _via.set(channel)
    try:
        yield
    finally:
        _via.reset(token)


class AuditViaMiddleware:
    """Marks writes made while serving a request as made through a page (the API overrides this)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _via.set(API if request.path.startswith("/api/") else PAGE)
        try:
            return self.get_response(request)
        finally:
            _via.reset(token)
