"""The registry of process-wide caches (common/caches.py) that tests/conftest.py empties before each test."""
from __future__ import annotations

from functools import lru_cache

import pytest

from accounts import oidc
from common import caches
from gpumetrics import client
from provisioning import services


def test_clear_all_empties_registered_functools_caches_dicts_and_clearing_functions(monkeypatch):
    monkeypatch.setattr(caches, "_CLEARERS", list(caches._CLEARERS))  # this test's caches go with it

    @caches.register
    @lru_cache(maxsize=8)
    def double(x: int) -> int:
        return 2 * x

    memo = caches.register({"a": 1})
    flags = {"checked": True}
    caches.register(lambda: flags.update(checked=False))
    double(1)
    assert double.cache_info().currsize == 1

    caches.clear_all()

    assert double.cache_info().currsize == 0 and memo == {} and flags == {"checked": False}


def test_register_refuses_what_is_not_a_cache():
    with pytest.raises(TypeError, match="is not a cache"):
        caches.register(42)


def test_the_console_s_own_caches_are_registered():
    oidc._clients["stale"] = object()
    services._SEEN_VERSIONS[1] = {"a": "1"}
    client._cache[("stale",)] = (0.0, None)

    caches.clear_all()

    assert oidc._clients == {} and services._SEEN_VERSIONS == {} and client._cache == {}
