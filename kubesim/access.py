"""The access record: every API request the emulator serves, as Kubernetes RBAC names it.

RBAC authorises a request by (verb, API group, resource[/subresource]) before the API server handles it,
so the record is taken from the request alone, whatever its answer (a 404 or 409 needed the permission
too). The verbs are RBAC's: ``get``, ``list``, ``watch`` (a GET with ``?watch=true``), ``create``
(POST), ``update`` (PUT), ``patch``, ``delete`` and ``deletecollection`` (DELETE on a collection).
Discovery, OpenAPI, ``/healthz`` and the control surface are non-resource URLs: not recorded.

Read it with :meth:`AccessMixin.access_log` (``POST /_emulator/access_log``), start afresh with
:meth:`AccessMixin.reset_access_log` (``POST /_emulator/reset_access_log``).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import NamedTuple
from urllib.parse import unquote

from kubesim.util import Obj

_TRUE = {"true", "1", "yes"}


class Access(NamedTuple):
    verb: str
    group: str  # "" for the core group
    resource: str  # the plural, "deployments/scale" for a subresource
    namespace: str  # "" for cluster-scoped requests and requests across all namespaces

    @property
    def rule(self) -> tuple[str, str, str]:
        """(verb, group, resource): what a ClusterRole rule must allow."""
        return self.verb, self.group, self.resource


def access_of(method: str, path: str, query: dict[str, str]) -> Access | None:
    """The RBAC request attributes of an API request, or None for a non-resource URL."""
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    if parts[:2] == ["api", "v1"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    watching = query.get("watch", "").lower() in _TRUE
    if method == "GET":
        verb = "watch" if watching else ("get" if named else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = method.lower()
    return Access(verb, group, resource, namespace)


class AccessMixin:
    """Part of :class:`kubesim.KubeEmulator`: the access record of the requests it served."""

    def _init_access(self) -> None:
        self._access_lock = threading.Lock()
        self._access: Counter[Access] = Counter()

    def _record_access(self, method: str, path: str, query: dict[str, str]) -> None:
        access = access_of(method, path, query)
        if access is not None:
            with self._access_lock:
                self._access[access] += 1

    def access_log(self) -> list[Obj]:
        """Every distinct request served since the start or the last reset, sorted: verb, group,
        resource (``plural[/subresource]``), namespace and how many times."""
        with self._access_lock:
            items = sorted(self._access.items())
        return [{"verb": a.verb, "group": a.group, "resource": a.resource, "namespace": a.namespace, "count": n}
                for a, n in items]

    def access_rules(self) -> set[tuple[str, str, str]]:
        """The distinct (verb, group, resource[/subresource]) a ClusterRole must allow for what was served."""
        with self._access_lock:
            return {a.rule for a in self._access}

    def reset_access_log(self) -> None:
        """Forget what was recorded so far."""
        with self._access_lock:
            self._access.clear()
