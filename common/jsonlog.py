"""One JSON object a line for log collectors (LOG_FORMAT=json; see the LOGGING block in settings)."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

# Attributes every LogRecord has; anything else was passed through `extra=` and is kept.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "timestamp": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Django's request loggers (django.request, django.server) pass the request and the status code.
        request = getattr(record, "request", None)
        if request is not None:
            path = getattr(request, "path", None)
            if isinstance(path, str):
                entry["path"] = path
                entry["method"] = getattr(request, "method", None)
        status = getattr(record, "status_code", None)
        if status is not None:
            entry["status"] = status
        for key, value in vars(record).items():
            if key in _STANDARD or key in ("request", "status_code", "server_time") or key in entry:
                continue
            if key == "request_id" and value is None:
                continue  # outside a request (common/requestid.py)
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                value = repr(value)
            entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
