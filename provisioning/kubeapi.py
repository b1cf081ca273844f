"""Karpenter NodePools read and written in a cluster through the official client (CustomObjectsApi),
as field manager `gpu-capacity-console`, raw JSON (the pattern of enforcers/kubeapi.py)."""
from __future__ import annotations

from typing import Any

import orjson

from nodepools.kube import FIELD_MANAGER, ApiRefusal, refusal_from
from provisioning.karpenter import GROUP, VERSION

PLURAL = "nodepools"
TIMEOUT = (5, 20)


class NodePools:
    """The Karpenter NodePools of one cluster."""

    def __init__(self, cluster: Any, api_client: Any = None):
        from kubernetes import client

        from nodepools.sync.informer import api_client_for

        self._own = api_client is None
        self.api_client = api_client or api_client_for(cluster)
        self.api = client.CustomObjectsApi(self.api_client)

    def close(self) -> None:
        if self._own:
            try:
                self.api_client.close()
            except Exception:  # pragma: no cover
                pass

    def __enter__(self) -> "NodePools":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn, *args, **kwargs) -> dict:
        try:
            response = fn(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
        except Exception as exc:  # ApiException, connection errors: one kind of refusal for the callers
            raise refusal_from(exc) from exc
        data = response.data
        return orjson.loads(data) if data else {}

    def get(self, name: str) -> dict | None:
        try:
            return self._call(self.api.get_cluster_custom_object, GROUP, VERSION, PLURAL, name)
        except ApiRefusal as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: dict) -> dict:
        return self._call(self.api.create_cluster_custom_object, GROUP, VERSION, PLURAL, obj,
                          field_manager=FIELD_MANAGER)

    def replace(self, obj: dict) -> dict:
        """PUT with `metadata.resourceVersion`: 409 when the object changed since it was read."""
        return self._call(self.api.replace_cluster_custom_object, GROUP, VERSION, PLURAL, obj["metadata"]["name"],
                          obj, field_manager=FIELD_MANAGER)

    def delete(self, name: str, *, uid: str = "", resource_version: str = "") -> None:
        preconditions = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        body = {"preconditions": preconditions} if preconditions else None
        try:
            self._call(self.api.delete_cluster_custom_object, GROUP, VERSION, PLURAL, name, body=body)
        except ApiRefusal as exc:
            if exc.status != 404:  # already gone is what was wanted
                raise
