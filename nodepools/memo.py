"""Reads a page makes several times, computed once per request: every GET and HEAD request
(`ReadsMemoMiddleware`), a view decorated with `@reads_memo` or a block `with reads_scope():` opens a scope; inside it `memoised(key, compute)` computes a value the first
time and hands the same one back afterwards (e.g. the running pods' usage of a cluster, which the fair
share, "Why is it waiting?" and the summaries all read). Outside a scope it always computes: writes and
the sync never see a value older than their own transaction. Values are shared: callers must not change them.

`fleet_memoised(key, compute)` keeps a value longer: across requests, for as long as no node or pod row of any
cluster changed (the database's data versions, `nodepools.models.DataVersion`, read once per request). The first
page after a change computes it, the pages after it read it from this process's memory: a figure of 50,000 pods
costs what a dictionary lookup does while the fleet holds still, and is never older than the rows it comes from.
Only what is computed from the mirrored nodes and pods alone goes there (not quotas, not the time of day)."""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Hashable, Iterator

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

from common import caches

_scope: ContextVar[dict | None] = ContextVar("reads_memo", default=None)


@contextmanager
def reads_scope() -> Iterator[None]:
    """A scope of memoised reads (nested scopes share the outer one)."""
    if _scope.get() is not None:
        yield
        return
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def reads_memo(view: Callable) -> Callable:
    """A view whose reads are memoised for the length of its request (read-only pages)."""
    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with reads_scope():
            return view(*args, **kwargs)
    return wrapper


@sync_and_async_middleware
def ReadsMemoMiddleware(get_response):  # noqa: N802 (a middleware is named like a class in settings)
    """Every GET and HEAD request (they change nothing) is a scope of memoised reads: the pages, the API's reads
    and the exports share what the fleet's sums cost (`fleet_memoised`)."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            if request.method not in ("GET", "HEAD"):
                return await get_response(request)
            with reads_scope():
                return await get_response(request)
    else:
        def middleware(request):
            if request.method not in ("GET", "HEAD"):
                return get_response(request)
            with reads_scope():
                return get_response(request)
    return middleware


def memoised(key: Hashable, compute: Callable[[], Any]) -> Any:
    scope = _scope.get()
    if scope is None:
        return compute()
    if key not in scope:
        scope[key] = compute()
    return scope[key]


# The values kept across requests, (key, data versions) -> value, the least recently used dropped past FLEET_SIZE
# (a registered process cache: the tests empty it, their databases rolling back to versions already seen).
FLEET_SIZE = 256
_fleet: OrderedDict = caches.register(OrderedDict())
_fleet_lock = threading.Lock()


def data_versions() -> tuple[tuple[int, int], ...]:
    """Every cluster's data version, (cluster id, seq) sorted: one query, once per request."""
    from nodepools.models import DataVersion

    return memoised("data_versions", lambda: tuple(DataVersion.objects.order_by("cluster_id")
                                                   .values_list("cluster_id", "seq")))


def _in_transaction() -> bool:
    """Whether a transaction of the console's own is open (not a test's outer one): what is read inside it may be
    rolled back with it, the data versions with it, and must not outlive it."""
    from django.db import connection

    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def fleet_memoised(key: Hashable, compute: Callable[[], Any]) -> Any:
    """`memoised`, kept across requests while the fleet's nodes and pods are unchanged (see the module's doc).
    Outside a scope of reads it always computes; inside a transaction it is kept for the request only."""
    if _scope.get() is None:
        return compute()
    if _in_transaction():
        return memoised(("fleet", key), compute)

    def kept() -> Any:
        versions = data_versions()
        full = (key, versions)
        with _fleet_lock:
            if full in _fleet:
                _fleet.move_to_end(full)
                return _fleet[full]
        value = compute()
        with _fleet_lock:
            # What was kept at other versions is of a fleet gone by (versions only rise): dropped, not left to
            # age out, so that a busy fleet keeps one version's values in memory, not FLEET_SIZE of them.
            stale = [k for k in _fleet if k[1] != versions]
            for k in stale:
                del _fleet[k]
            _fleet[full] = value
            while len(_fleet) > FLEET_SIZE:
                _fleet.popitem(last=False)
        return value

    return memoised(("fleet", key), kept)
