"""Live updates: a websocket that forwards "this cluster changed" hints to the browser.

The browser then refetches its table through the normal view, so filters, sort and permissions apply
exactly as on a reload; a hint carries no data. A connection joins only the groups of clusters the
user may view; an anonymous connection is refused.
"""
from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from nodepools import hints
from nodepools.models import Cluster

CLOSE_UNAUTHENTICATED = 4401
# Without a channel layer shared between processes, how often the database marks are polled.
POLL_SECONDS = 0.4


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/live/?clusters=1,2`: hints for those of the listed clusters the user may view (all when
    none is listed), as `{"type": "changed", "cluster": id, "kinds": [...]}`."""

    groups: list[str] = []

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.cluster_ids = await self._visible_clusters(user, self._wanted())
        self.joined = [hints.group_name(pk) for pk in self.cluster_ids]
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "clusters": self.cluster_ids})
        self.poller = None
        if self.cluster_ids and not hints.layer_spans_processes():
            self.poller = asyncio.create_task(self._poll_marks())

    async def _poll_marks(self):
        """Turn the sync's database marks (`Cluster.hint_seq`) into hints: the in-memory layer cannot
        carry them from the sync's process to this one."""
        seen = await self._marks()
        while True:
            await asyncio.sleep(POLL_SECONDS)
            marks = await self._marks()
            for pk, seq in marks.items():
                if seen.get(pk) != seq:
                    await self.send_json({"type": "changed", "cluster": pk, "kinds": sorted(hints.KINDS)})
            seen = marks

    @database_sync_to_async
    def _marks(self) -> dict[int, int]:
        return dict(Cluster.objects.filter(pk__in=self.cluster_ids).values_list("pk", "hint_seq"))

    def _wanted(self) -> set[int] | None:
        query = self.scope.get("query_string", b"").decode("latin-1")
        for part in query.split("&"):
            name, _, value = part.partition("=")
            if name == "clusters" and value:
                return {int(v) for v in value.replace("%2C", ",").split(",") if v.strip().isdigit()}
        return None

    @database_sync_to_async
    def _visible_clusters(self, user, wanted: set[int] | None) -> list[int]:
        clusters = Cluster.objects.restrict(user, "view")
        if wanted is not None:
            clusters = clusters.filter(pk__in=wanted)
        return sorted(clusters.values_list("pk", flat=True))

    async def disconnect(self, code):
        poller = getattr(self, "poller", None)
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # Keep-alive from the browser; nothing else is accepted from it.
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def cluster_changed(self, event):
        if event.get("cluster") in self.cluster_ids:
            await self.send_json({"type": "changed", "cluster": event["cluster"], "kinds": event.get("kinds", [])})
