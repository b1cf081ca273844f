"""Logging of refused requests: one line each (method, path, status, user), never a traceback.

Django logs every 4xx response on `django.request` (and CSRF failures on `django.security.csrf`),
a PermissionDenied with its traceback. A refusal is ordinary (a stale link, an expired form, a role
that does not allow it); the line says what happened and to whom. Server errors (5xx) keep their
traceback. Each line carries the request's id (common/requestid.py).
"""
from __future__ import annotations

import logging


class RefusedRequestFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        request = getattr(record, "request", None)
        if getattr(record, "request_id", None) is None and request is not None:
            # Django logs a response's status after the middleware returned it: the id is the request's.
            record.request_id = getattr(request, "request_id", None)
        if status is None or status >= 500 or request is None or getattr(record, "refused_line", False):
            return True  # (logging configured twice adds the filter twice: rewrite once)
        record.refused_line = True
        try:
            user = getattr(request, "user", None)
            who = user.get_username() if user is not None and user.is_authenticated else "anonymous"
        except Exception:  # the log line must not fail because the session cannot be read
            who = "unknown"
        reason = record.getMessage().split(":", 1)[0]  # "Not Found", "Forbidden", "Forbidden (CSRF token missing.)"
        record.msg = "%s %s %s user=%s (%s)"
        record.args = (request.method, request.get_full_path(), status, who, reason)
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True
