"""Karpenter NodePools read and written in a cluster: kube.client.CustomObjects bound to the NodePool kind,
owning the cluster's API client (as field manager `gpu-capacity-console`, raw JSON; every failure an
ApiRefusal, a missing NodePool None)."""
from __future__ import annotations

from typing import Any

from kube.client import CustomKind, CustomObjects
from nodepools.sync.informer import api_client_for
from provisioning.karpenter import GROUP, VERSION

NODEPOOLS = CustomKind(GROUP, VERSION, "nodepools", "NodePool")


class NodePools:
    """The Karpenter NodePools of one cluster."""

    def __init__(self, cluster: Any, api_client: Any = None):
        self._own = api_client is None
        self.api_client = api_client or api_client_for(cluster)
        self.objects = CustomObjects(self.api_client)

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

    def get(self, name: str) -> dict | None:
        return self.objects.get(NODEPOOLS, name)

    def create(self, obj: dict) -> dict:
        return self.objects.create(NODEPOOLS, obj)

    def replace(self, obj: dict) -> dict:
        """PUT with `metadata.resourceVersion`: 409 when the object changed since it was read."""
        return self.objects.replace(NODEPOOLS, obj)

    def delete(self, name: str, *, uid: str = "", resource_version: str = "") -> None:
        """Delete on the preconditions given; already gone is what was wanted."""
        self.objects.delete(NODEPOOLS, name, uid=uid, resource_version=resource_version)
