"""Change hints: "this cluster's nodes/pods/pools changed", sent over the channel layer.

The sync publishes one after each committed batch (coalesced); the live pages listen and refetch their
table through the normal view, so filters, sort and permissions always apply. A hint carries no data.
"""
from __future__ import annotations

from typing import Iterable

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

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


def layer_spans_processes() -> bool:
    """Whether a hint sent here reaches consumers in other processes (Redis: yes; in-memory: no)."""
    layer = get_channel_layer()
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


def record(cluster_id: int) -> None:
    """Leave a mark in the database for web processes the channel layer cannot reach.

    Without Redis the sync and the web server share only the database: the sync bumps the
    cluster's `hint_seq` and the live consumer polls it (see `LiveConsumer`). With Redis this is
    a no-op: the hint itself travels.
    """
    if layer_spans_processes():
        return
    from django.db.models import F

    from nodepools.models import Cluster

    Cluster.objects.filter(pk=cluster_id).update(hint_seq=F("hint_seq") + 1)


def publish(cluster_id: int, kinds: Iterable[str]) -> None:
    """Send a hint from synchronous code (the sync, services after commit)."""
    async_to_sync(publish_async)(cluster_id, kinds)
