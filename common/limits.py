"""The request body limit: one setting (`CONSOLE_MAX_BODY_BYTES`, default 1 MiB), one answer (413).

A body larger than the limit is refused before anything reads it into memory, on every path (pages,
API, uploads): `{"detail", "errors": {"request_body": [...]}}` under `/api/`, a plain page elsewhere,
both naming the limit. Where it is enforced, by protocol:

- ASGI (Daphne, production): `BodyLimitASGI` wraps the HTTP application. It refuses at once when
  `Content-Length` is over the limit, and otherwise counts the bytes of the `http.request` messages,
  refusing as soon as they pass the limit (a chunked body has no `Content-Length`), so Django, its
  spooled upload files and the parsers never see more than the limit.
- Daphne itself buffers a whole request (Twisted stores the body, then Daphne queues all of it as
  `http.request` messages before the application reads one) — so `daphne_body_cap()` makes Daphne's
  request keep at most limit + 1 bytes of a body and drop the rest as it arrives: the application
  still sees that the body was too large, and memory stays bounded whatever the client sends.
- WSGI and Django's test client: `BodyLimitMiddleware`, first in MIDDLEWARE, refuses a
  `Content-Length` over the limit (a WSGI server reads no more than `Content-Length`).

Django's own limits agree: DATA_UPLOAD_MAX_MEMORY_SIZE and FILE_UPLOAD_MAX_MEMORY_SIZE are the same
number (console/settings.py).
"""
from __future__ import annotations

import logging

import orjson
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.template import loader

from common import requestid
from common.parsing import is_digits

logger = logging.getLogger("console.limits")

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


def max_body_bytes() -> int:
    return int(getattr(settings, "CONSOLE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))


def _human(size: int) -> str:
    for unit, factor in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def too_large_message(limit: int) -> str:
    return (f"The request body is larger than the console accepts: at most {_human(limit)} ({limit} bytes) "
            "in one request. Nothing was read or stored.")


def _is_api(path: str) -> bool:
    return path.startswith("/api/")


def too_large_body(path: str, limit: int, request_id: str | None = None) -> tuple[bytes, bytes]:
    """(content type, body) of the 413 answer for `path`."""
    message = too_large_message(limit)
    if _is_api(path):
        return b"application/json", orjson.dumps(
            {"detail": message, "errors": {"request_body": [f"At most {limit} bytes ({_human(limit)})."]},
             "request_id": request_id or requestid.new_id()})

    return b"text/html; charset=utf-8", loader.render_to_string(
        "413.html", {"message": message, "limit": _human(limit)}).encode()


def too_large_response(request) -> HttpResponse:
    limit = max_body_bytes()
    content_type, body = too_large_body(request.path, limit, requestid.of(request))
    if _is_api(request.path):
        return JsonResponse(orjson.loads(body), status=413)
    return HttpResponse(body, status=413, content_type=content_type.decode())


class BodyLimitMiddleware:
    """WSGI / test client: a declared body over the limit is refused before any view or middleware reads it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        declared = request.META.get("CONTENT_LENGTH") or ""
        if is_digits(declared.strip()) and int(declared) > max_body_bytes():
            return too_large_response(request)
        return self.get_response(request)


class BodyLimitASGI:
    """ASGI: refuse a body over the limit from its Content-Length, or as soon as its bytes pass it;
    otherwise hand the application the (bounded) body read so far."""

    def __init__(self, app, limit: int | None = None):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit if self.limit is not None else max_body_bytes()
        for name, value in scope.get("headers") or ():
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                return await self._refuse(scope, send, limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nothing to answer
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                return await self._refuse(scope, send, limit)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        chunks.clear()
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()  # later: the disconnect Django listens for while streaming

        return await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope, send, limit: int) -> None:
        offered = next((value for name, value in scope.get("headers") or () if name == b"x-request-id"), None)
        request_id = requestid.new_id(offered)
        path = scope.get("path", "")
        logger.warning("%s %s 413 (body over %s bytes)", scope.get("method", ""), path[:200], limit,
                       extra={"request_id": request_id})
        content_type, body = too_large_body(path, limit, request_id)
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", content_type), (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def daphne_body_cap() -> None:
    """Make Daphne's request keep at most limit + 1 bytes of a body (see the module docstring).

    Twisted calls `handleContentChunk` for every piece of the body as it arrives; past the limit the
    pieces are dropped instead of stored, so neither Twisted's buffer nor Daphne's queue of
    `http.request` messages grows with what the client sends. `BodyLimitASGI` then answers 413."""
    try:  # late: guarded, a WSGI deployment runs without Daphne
        from daphne.http_protocol import WebRequest
    except ImportError:  # pragma: no cover - Daphne is a dependency; WSGI deployments do without it
        return
    if getattr(WebRequest, "_console_body_cap", False):
        return
    original = WebRequest.handleContentChunk

    def handleContentChunk(self, data):
        kept = getattr(self, "_console_body_kept", 0)
        room = max_body_bytes() + 1 - kept
        if room <= 0:
            return
        if len(data) > room:
            data = data[:room]
        self._console_body_kept = kept + len(data)
        original(self, data)

    WebRequest.handleContentChunk = handleContentChunk
    WebRequest._console_body_cap = True


# ---------------------------------------------------------------------------------------------------
# The request line and the headers (Daphne, through Twisted's HTTPChannel)

REQUEST_LINE_MESSAGE = ("The request line is too long: at most {limit} bytes of method, address and query string. "
                        "Ask for fewer values at a time, or send them in a request body.")
HEADERS_MESSAGE = ("The request's headers are too large: at most {limit} bytes and {count} headers with the request "
                   "line. Send fewer or shorter headers (cookies included).")
_REASONS = {414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


def header_refusal(status: int, path: bytes | str, message: str, request_id: str) -> bytes:
    """The whole HTTP answer (414 or 431) to a request whose line or headers are over the limit: the API's
    JSON under /api/, a line of text elsewhere; the connection closes after it."""
    if isinstance(path, bytes):
        path = path.decode("latin-1")
    if _is_api(path):
        content_type, body = b"application/json", orjson.dumps({"detail": message, "request_id": request_id})
    else:
        content_type, body = b"text/plain; charset=utf-8", f"{status} {_REASONS[status].decode()}: {message}\n".encode()
    return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nX-Request-ID: %s\r\nConnection: close\r\n\r\n"
            % (status, _REASONS[status], content_type, len(body), request_id.encode()) + body)


def daphne_header_limits() -> None:
    """Answer 414 (request line) or 431 (headers) where Twisted would close the connection without a word.

    Twisted's HTTPChannel (which Daphne serves HTTP with) reads the request line and each header as a line
    of at most `MAX_LENGTH` (16 KiB) bytes, the request line and headers together at most
    `totalHeadersSize` (16 KiB), and at most `maxHeaders` (500) headers. Past `MAX_LENGTH` it drops the
    connection (LineReceiver.lineLengthExceeded), past the others it answers a bare 400. Here each of
    these is answered: the status, a short message naming the limit, then the connection is closed once
    the answer is sent (the rest of what the client sends is read and dropped, for at most 5 seconds)."""
    try:  # late: guarded, a WSGI deployment runs without Daphne
        from twisted.internet import reactor
        from twisted.web import http
    except ImportError:  # pragma: no cover - Daphne is a dependency
        return
    channel = http.HTTPChannel
    if getattr(channel, "_console_header_limits", False):
        return
    original_line, original_header = channel.lineReceived, channel.headerReceived

    def in_request_line(self) -> bool:
        return bool(getattr(self, "_HTTPChannel__first_line", 0))

    def refuse(self, status: int, path: bytes) -> None:
        if getattr(self, "_console_refused", False):
            return
        self._console_refused = True
        if status == 414:
            message = REQUEST_LINE_MESSAGE.format(limit=self.MAX_LENGTH)
        else:
            message = HEADERS_MESSAGE.format(limit=self.totalHeadersSize, count=self.maxHeaders)
        request_id = requestid.new_id()
        logger.warning("%d %s (%s) request_id=%s", status, _REASONS[status].decode(), path[:200].decode("latin-1"),
                       request_id, extra={"request_id": request_id})
        self.dataReceived = lambda data: None  # everything after: read, dropped
        self.transport.write(header_refusal(status, path, message, request_id))
        half_close = getattr(self.transport, "loseWriteConnection", None)
        if half_close is not None:
            half_close()  # the answer, then FIN: the client reads it before its own close
            reactor.callLater(5, self.transport.abortConnection)
        else:  # pragma: no cover - a transport that cannot half-close
            self.transport.loseConnection()

    def request_path(line: bytes) -> bytes:
        parts = line.split(b" ", 2)
        return parts[1] if len(parts) > 1 else b""

    def lineLengthExceeded(self, line):
        if in_request_line(self):
            return refuse(self, 414, request_path(line))
        return refuse(self, 431, getattr(self, "_path", b"") or b"")

    def lineReceived(self, line):
        if getattr(self, "_console_refused", False):
            return None
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            if in_request_line(self):
                return refuse(self, 414, request_path(line))
            return refuse(self, 431, getattr(self, "_path", b"") or b"")
        return original_line(self, line)

    def headerReceived(self, line):
        if getattr(self, "_console_refused", False):
            return False
        if self._receivedHeaderCount + 1 > self.maxHeaders:
            refuse(self, 431, getattr(self, "_path", b"") or b"")
            return False
        return original_header(self, line)

    channel.lineLengthExceeded = lineLengthExceeded
    channel.lineReceived = lineReceived
    channel.headerReceived = headerReceived
    channel._console_header_limits = True
