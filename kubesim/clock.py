"""The emulator's one clock: what every step reads and every timestamp it writes comes from.

A :class:`KubeEmulator` is given one clock (``KubeEmulator(clock=...)``, default :class:`RealClock`).
The store stamps ``creationTimestamp``, ``managedFields[].time``, ``deletionTimestamp``, conditions'
``lastTransitionTime``, events, a pod's ``startTime`` and its containers' ``startedAt``/``finishedAt``
from it; chaos, Karpenter's stand-in and the controllers (Job controller, kubelet, schedulers) read
``clock.now()`` to decide what is due.  Times are seconds since the epoch (floats); timestamps are RFC 3339
in whole seconds (``2025-01-01T00:00:00Z``), as the API server writes them.

:class:`ManualClock` moves only when told (``advance(seconds)``, ``set(t)``): with it a test decides what
"now" is, every timestamp is deterministic, and nothing runs by itself (the emulator's controller thread
does not start; the test calls :meth:`KubeEmulator.tick`).
"""

from __future__ import annotations

import calendar
import datetime as dt
import threading
import time

#: Where a :class:`ManualClock` starts unless told otherwise: 2025-01-01T00:00:00Z.
MANUAL_EPOCH = 1735689600.0


def rfc3339(t: float) -> str:
    """``t`` (seconds since the epoch) as the API server writes a timestamp: UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def parse_rfc3339(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp (``Z`` or an offset, fractions allowed); None when
    it is missing or not a timestamp."""
    if not isinstance(text, str) or not text:
        return None
    try:
        if text.endswith("Z") and len(text) == 20:  # the common case, fast
            return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


class Clock:
    """What "now" is for one emulator."""

    #: True for a clock that moves only when told (tests); the controller thread runs only on a real clock.
    manual = False

    def now(self) -> float:
        """Seconds since the epoch."""
        raise NotImplementedError

    def rfc3339(self, t: float | None = None) -> str:
        """``t`` (default: now) as an RFC 3339 timestamp in whole seconds."""
        return rfc3339(self.now() if t is None else t)

    def datetime(self) -> dt.datetime:
        """Now as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.now(), dt.UTC)


class RealClock(Clock):
    """The wall clock (``time.time``)."""

    def now(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "RealClock()"


class ManualClock(Clock):
    """A clock that moves only when told: ``advance(seconds)`` or ``set(t)`` (a float or an RFC 3339 text)."""

    manual = True

    def __init__(self, start: float | str = MANUAL_EPOCH) -> None:
        self._lock = threading.Lock()
        self._t = self._seconds(start)

    @staticmethod
    def _seconds(t: float | str) -> float:
        if isinstance(t, str):
            parsed = parse_rfc3339(t)
            if parsed is None:
                raise ValueError(f"not an RFC 3339 timestamp: {t!r}")
            return parsed
        return float(t)

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (not negative); returns the new time."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        with self._lock:
            self._t += float(seconds)
            return self._t

    def set(self, t: float | str) -> float:
        """Jump to ``t`` (seconds since the epoch, or an RFC 3339 text); returns it."""
        with self._lock:
            self._t = self._seconds(t)
            return self._t

    def __repr__(self) -> str:
        return f"ManualClock({rfc3339(self._t)!r})"
