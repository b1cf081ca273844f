"""Fault injection: dropped watches, injected error responses, going offline, history compaction."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from kubesim.errors import ApiError
from kubesim.store import _Event, _Fault

_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


class FaultsMixin:
    """Part of :class:`kubesim.KubeEmulator`: what goes wrong on purpose."""

    # ------------------------------------------------------------------ faults

    def drop_watches(self) -> int:
        """Abruptly close every open watch stream (no final chunk); returns how many."""
        with self._lock:
            watches = list(self._watches)
            for w in watches:
                w.dropped = True
            # Gone at once, as far as anyone asking the emulator is concerned; the serving threads
            # still see `dropped` and end without a final chunk.
            self._watches.clear()
            self._cond.notify_all()
        for w in watches:
            if w.started:  # otherwise its thread sends the headers, sees `dropped` and ends the stream
                _shutdown_socket(w.sock)
        return len(watches)

    def fail_next(
        self, n: int = 1, status: int = 500, path_prefix: str | None = None, retry_after: int | None = 1
    ) -> None:
        """Answer the next ``n`` API requests (whose path starts with ``path_prefix``) with an error Status.

        429 carries a ``Retry-After`` header and ``details.retryAfterSeconds``
        (``retry_after=None`` leaves them out).  Note that urllib3, under the
        kubernetes client, transparently retries a 429 with ``Retry-After``
        (after sleeping that long) unless the client's ``retries`` are off.
        Control (/_emulator) requests are never affected.
        """
        with self._lock:
            self._faults.append(_Fault(int(n), int(status), path_prefix, retry_after))

    def set_offline(self, offline: bool = True, mode: str = "refuse", duration: float | None = None,
                    spare: socket.socket | None = None) -> None:
        """Take the API offline or back online.

        ``mode="refuse"``: the listening socket is closed (connection refused)
        and open connections are cut; coming back reopens the same port.
        ``mode="reset"``: the server keeps listening but closes every API
        request's connection without a response (``/_emulator`` still works).
        ``duration``: come back online automatically after that many seconds.
        ``spare``: a connection left open (the control request's own, answered once the API is offline).
        """
        if mode not in ("refuse", "reset"):
            raise ApiError(400, f"unknown offline mode {mode!r}", "BadRequest")
        # All under the lock, timer armed last: a short duration must not race the unbind.
        with self._lock:
            if self._offline_timer is not None:
                self._offline_timer.cancel()
                self._offline_timer = None
            started = self.url is not None
            if not offline:
                if self._offline_mode == "refuse" and self._server is None and started:
                    self._bind(self._port)
                self._offline_mode = None
                return
            self._offline_mode = mode
            self.drop_watches()
            if mode == "refuse":
                self._unbind(spare=spare)
            else:
                if self._server is None and started:
                    self._bind(self._port)  # from "refuse" to "reset": listen again
                self._cut_connections(spare=spare)  # idle keep-alive connections must not keep working
            if duration is not None:
                timer = threading.Timer(duration, self.set_offline, args=(False,))
                timer.daemon = True
                self._offline_timer = timer
                timer.start()

    def _cut_connections(self, spare: socket.socket | None = None) -> None:
        with self._conns_lock:
            conns = [conn for conn in self._conns if conn is not spare]
        for conn in conns:
            _shutdown_socket(conn)

    @property
    def offline(self) -> bool:
        return self._offline_mode is not None

    def compact(self) -> int:
        """Forget all history: every rv handed out so far gives 410 on watch and on continue.

        The resourceVersion moves on by one (with no event) so that lists made after the
        compaction are valid starting points; returns that new rv.
        """
        with self._lock:
            self._rv += 1
            self._floor_rv = self._rv
            self._min_seq = self._seq
            return self._rv

    def set_history_size(self, n: int) -> None:
        """Resize the event history (keeps the newest events that fit)."""
        n = max(1, int(n))
        with self._lock:
            lo = max(self._seq - self._ring_size, 0)
            events = [self._ring[s % self._ring_size] for s in range(lo, self._seq)]
            ring: list[_Event | None] = [None] * n
            kept_from = max(self._seq - n, lo)
            for s in range(lo, kept_from):
                ev = events[s - lo]
                if ev is not None and ev.rv > self._floor_rv:
                    self._floor_rv = ev.rv
            for s in range(kept_from, self._seq):
                ring[s % n] = events[s - lo]
            self._ring, self._ring_size = ring, n

    def _take_fault(self, path: str) -> ApiError | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.path_prefix is None or path.startswith(fault.path_prefix)):
                    fault.remaining -= 1
                    break
            else:
                return None
            self._faults = [f for f in self._faults if f.remaining > 0]
        self._count("faults_injected")
        retry = fault.retry_after if fault.status == 429 else None
        message = _FAULT_MESSAGES.get(fault.status, f"injected fault {fault.status}")
        return ApiError(fault.status, message, retry_after=retry)

    # ------------------------------------------------------------------ connection tracking

    def _track(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.discard(conn)

def _shutdown_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client has closed its side (readable with EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


