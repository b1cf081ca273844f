"""Reads a page makes several times, computed once per request: a view decorated with `@reads_memo` (or a
block `with reads_scope():`) opens a scope; inside it `memoised(key, compute)` computes a value the first
time and hands the same one back afterwards (e.g. the running pods' usage of a cluster, which the fair
share, "Why is it waiting?" and the summaries all read). Outside a scope it always computes: writes and
the sync never see a value older than their own transaction. Values are shared: callers must not change them."""
from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Hashable, Iterator

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


def memoised(key: Hashable, compute: Callable[[], Any]) -> Any:
    scope = _scope.get()
    if scope is None:
        return compute()
    if key not in scope:
        scope[key] = compute()
    return scope[key]
