"""The process-wide caches, in one list, so that tests can empty them all between two tests.

A cache is anything a process keeps from one call to the next to answer faster: an `lru_cache`d
function, a module-level dict, the answer of a check that does not change for the process. Each
registers where it is defined:

    @caches.register
    @lru_cache(maxsize=1024)
    def parse(text): ...

    _clients: dict[Key, Client] = caches.register({})

    caches.register(forget_everything)   # any callable that empties one

`clear_all()` empties every registered cache (tests/conftest.py calls it before each test). Nothing
here imports Django or an app: the ground floor, usable by `kube` and the emulator alike.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")

_CLEARERS: list[Callable[[], None]] = []


def register(cache: T) -> T:
    """Register `cache` (an `lru_cache`/`cache` wrapper, an object with `.clear()`, or a callable that
    empties a cache) and return it unchanged, so that it can be a decorator or wrap an assignment."""
    clear: Any = getattr(cache, "cache_clear", None) or getattr(cache, "clear", None) or cache
    if not callable(clear):
        raise TypeError(f"{cache!r} is not a cache: no cache_clear(), no clear(), not callable")
    _CLEARERS.append(clear)
    return cache


def clear_all() -> None:
    """Empty every registered cache."""
    for clear in _CLEARERS:
        clear()
