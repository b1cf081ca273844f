"""Reading and writing the enforcer's objects through the official client (raw JSON, any group).

Every kind the console writes lives in a named API group (scheduling.k8s.io, scheduling.run.ai,
kai.scheduler, kueue.x-k8s.io), so `CustomObjectsApi` reaches all of them.
"""
from __future__ import annotations

from typing import Any

import orjson

from nodepools.kube import FIELD_MANAGER, refusal_from

TIMEOUT = (5, 20)


def split(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class Objects:
    """The objects of one cluster, by (group, version, plural)."""

    def __init__(self, api_client: Any):
        from kubernetes import client

        self.api = client.CustomObjectsApi(api_client)

    def list(self, kind: tuple[str, str, str, str], label_selector: str) -> list[dict]:
        """Every object of a kind carrying the label selector (all namespaces), paginated. A kind the
        cluster does not serve (its CRD is not installed) lists as nothing."""
        from kubernetes.client.exceptions import ApiException

        group, version, plural, _ = kind
        items: list[dict] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"label_selector": label_selector, "limit": 500}
            if token:
                kwargs["_continue"] = token
            try:
                response = self.api.list_cluster_custom_object(group, version, plural, _preload_content=False,
                                                               _request_timeout=TIMEOUT, **kwargs)
            except ApiException as exc:
                if exc.status == 404:
                    return []
                raise
            body = orjson.loads(response.data)
            for item in body.get("items") or []:
                item.setdefault("apiVersion", f"{group}/{version}")
                item.setdefault("kind", kind[3])
                items.append(item)
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _call(self, fn, *args, **kwargs) -> dict:
        response = fn(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
        data = response.data
        return orjson.loads(data) if data else {}

    def create(self, kind, obj: dict) -> dict:
        group, version, plural, _ = kind
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace:
            return self._call(self.api.create_namespaced_custom_object, group, version, namespace, plural, obj,
                              field_manager=FIELD_MANAGER)
        return self._call(self.api.create_cluster_custom_object, group, version, plural, obj,
                          field_manager=FIELD_MANAGER)

    def replace(self, kind, obj: dict) -> dict:
        group, version, plural, _ = kind
        meta = obj.get("metadata") or {}
        if meta.get("namespace"):
            return self._call(self.api.replace_namespaced_custom_object, group, version, meta["namespace"], plural,
                              meta["name"], obj, field_manager=FIELD_MANAGER)
        return self._call(self.api.replace_cluster_custom_object, group, version, plural, meta["name"], obj,
                          field_manager=FIELD_MANAGER)

    def delete(self, kind, obj: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        group, version, plural, _ = kind
        meta = obj.get("metadata") or {}
        precondition = {"preconditions": {"uid": meta["uid"]}} if meta.get("uid") else None
        try:
            if meta.get("namespace"):
                self._call(self.api.delete_namespaced_custom_object, group, version, meta["namespace"], plural,
                           meta["name"], body=precondition)
            else:
                self._call(self.api.delete_cluster_custom_object, group, version, plural, meta["name"],
                           body=precondition)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise
