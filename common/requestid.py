"""A request id for every request, carried by its log lines and by its error answers.

`RequestIdMiddleware` (first in MIDDLEWARE) takes the id a proxy sent in `X-Request-ID` when it is a
short token (letters, digits, `.`, `_`, `-`, `:`; at most 64), else makes one (32 hex digits); it answers
it in `X-Request-ID`. While the request runs, every log record gets `request_id` (the plain log format
ends its lines with `request_id=…`, LOG_FORMAT=json writes the key), and the API's error bodies carry
`request_id` (common/api.py, common/errors.py): a person reporting an error quotes the id, an operator
finds its traceback.
"""
from __future__ import annotations

import contextvars
import logging
import re
import uuid

HEADER = "X-Request-ID"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,64}", re.ASCII)
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("console_request_id", default=None)


def new_id(offered: str | bytes | None = None) -> str:
    """`offered` when it is a valid id (what a proxy sent), else a new one."""
    if isinstance(offered, bytes):
        offered = offered.decode("latin-1")
    if offered and _VALID.fullmatch(offered.strip()):
        return offered.strip()
    return uuid.uuid4().hex


def current() -> str | None:
    """The id of the request being answered (None outside a request)."""
    return _current.get()


def bind(request_id: str) -> contextvars.Token:
    return _current.set(request_id)


def unbind(token: contextvars.Token) -> None:
    _current.reset(token)


def of(request) -> str:
    """The id of `request` (made now when the middleware did not run, e.g. a handler of a request that
    failed before it)."""
    request_id = getattr(request, "request_id", None) or current()
    if request_id is None:
        request_id = new_id(request.headers.get(HEADER) if hasattr(request, "headers") else None)
        try:
            request.request_id = request_id
        except AttributeError:  # pragma: no cover - a request object that takes no attribute
            pass
    return request_id


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = new_id(request.headers.get(HEADER))
        token = bind(request.request_id)
        try:
            response = self.get_response(request)
        finally:
            unbind(token)
        response[HEADER] = request.request_id
        return response


_factory = logging.getLogRecordFactory()


def _record_factory(*args, **kwargs) -> logging.LogRecord:
    record = _factory(*args, **kwargs)
    if not hasattr(record, "request_id"):
        record.request_id = _current.get()
    return record


if not getattr(logging.getLogRecordFactory(), "_console_request_id", False):
    _record_factory._console_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(_record_factory)


class PlainFormatter(logging.Formatter):
    """The plain log line, ending with `request_id=…` while a request is answered."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        if not request_id:
            return line
        first, newline, rest = line.partition("\n")  # after the message, before a traceback
        return f"{first} request_id={request_id}{newline}{rest}"
