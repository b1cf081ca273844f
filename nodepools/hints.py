"""Change hints: "this cluster's nodes/pods/pools changed", sent over the channel layer.

The sync publishes one after each committed batch (coalesced); the live pages listen and refetch their
table through the normal view, so filters, sort and permissions always apply. A hint carries no data.
"""
from __future__ import annotations

from typing import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

MESSAGE_TYPE = "cluster.changed"  # handled by a consumer method `cluster_changed`
KINDS = frozenset({"nodes", "pods", "pools", "quotas", "cluster"})


def group_name(cluster_id: int) -> str:
    """The channel-layer group of one cluster's live pages."""
    return f"cluster.{cluster_id}"


def message(cluster_id: int, kinds: Iterable[str]) -> dict:
    kinds = sorted(set(kinds) & KINDS)
    return {"type": MESSAGE_TYPE, "cluster": cluster_id, "kinds": kinds}


async def publish_async(cluster_id: int, kinds: Iterable[str]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group_name(cluster_id), message(cluster_id, kinds))


def publish(cluster_id: int, kinds: Iterable[str]) -> None:
    """Send a hint from synchronous code (the sync, services after commit)."""
    async_to_sync(publish_async)(cluster_id, kinds)
