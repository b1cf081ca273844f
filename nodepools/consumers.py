"""Live updates: a websocket that forwards "this cluster changed" hints to the browser.

The browser then refetches its table through the normal view, so filters, sort and permissions apply
exactly as on a reload; a hint carries no data. A connection joins only the groups of clusters the
user may view; an anonymous connection is refused.

The connection also carries each cluster's state (connected / degraded / unreachable, stale since,
last full sync) as `{"type": "cluster", ...}` when asked with `state=1`: at once, whenever a "cluster"
hint arrives, and after a check every few seconds, because a sync leader that hangs sends no hint
(its heartbeat just gets old) and without Redis the sync's hints do not reach this process at all.
Only a change is sent.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db import DatabaseError

from common import parsing
from common.parsing import is_digits
from nodepools import hints
from nodepools.models import Cluster

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
# Without a channel layer shared between processes, how often the database marks are polled.
POLL_SECONDS = 0.4
# How often the clusters' state is re-read (a hung leader's heartbeat gets old without any hint).
STATE_SECONDS = 2.0


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/live/?clusters=1,2[&state=1]`: hints for those of the listed clusters the user may view (all
    when none is listed), as `{"type": "changed", "cluster": id, "kinds": [...]}`; with `state=1` also
    their state as `{"type": "cluster", "clusters": [...], "badges": html, "banners": html}`."""

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
        # The marks now: a page rendered at older marks missed a hint while it connected, and refetches.
        marks = await self._marks() if self.cluster_ids else {}
        await self.send_json({"type": "hello", "clusters": self.cluster_ids,
                              "marks": {str(pk): seq for pk, seq in marks.items()}})
        self.user = user
        self.follow_state = self._param("state") == "1"
        self.state_sent = None
        self.state_lock = asyncio.Lock()
        if self.follow_state and self.cluster_ids:
            await self._send_state()
        self.poll_marks = bool(self.cluster_ids) and not hints.layer_spans_processes()
        self.poller = None
        if self.poll_marks or (self.follow_state and self.cluster_ids):
            self.poller = asyncio.create_task(self._poll())

    async def _poll(self):
        """Turn the sync's database marks (`Cluster.hint_seq`) into hints when the in-memory layer cannot
        carry them from the sync's process to this one, and re-read the clusters' state now and then."""
        seen = await self._marks() if self.poll_marks else {}
        checked = time.monotonic()
        while True:
            await asyncio.sleep(POLL_SECONDS if self.poll_marks else STATE_SECONDS)
            try:
                moved = False
                if self.poll_marks:
                    marks = await self._marks()
                    for pk, seq in marks.items():
                        if seen.get(pk) != seq:
                            moved = True
                            await self.send_json({"type": "changed", "cluster": pk, "kinds": sorted(hints.KINDS)})
                    seen = marks
                if self.follow_state and (moved or time.monotonic() - checked >= STATE_SECONDS):
                    checked = time.monotonic()
                    await self._send_state()
            except DatabaseError as exc:  # a busy or restarting database: the next round tries again
                logger.warning("live updates: could not read the clusters' state: %s", exc)

    async def _send_state(self):
        """Send the clusters' state if it differs from what this connection sent last."""
        async with self.state_lock:
            states = await self._states()
            if states == self.state_sent:
                return
            self.state_sent = states
            html = await database_sync_to_async(hints.render_cluster_states)(states)
            await self.send_json({"type": hints.CLUSTER_MESSAGE, "clusters": states, **html})

    @database_sync_to_async
    def _states(self) -> list[dict]:
        return hints.cluster_states(user=self.user, cluster_ids=self.cluster_ids)

    @database_sync_to_async
    def _marks(self) -> dict[int, int]:
        return hints.marks(self.cluster_ids)

    def _param(self, wanted: str) -> str | None:
        query = self.scope.get("query_string", b"").decode("latin-1")
        for part in query.split("&"):
            name, _, value = part.partition("=")
            if name == wanted:
                return value
        return None

    def _wanted(self) -> set[int] | None:
        value = self._param("clusters")
        if value:
            return {int(v) for v in value.replace("%2C", ",").split(",") if is_digits(v.strip())}
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

    @classmethod
    async def decode_json(cls, text_data):
        """The browser sends keep-alives only: anything else, deep or large JSON included, is read as
        nothing (bounded parsing, common/parsing.py; Daphne refuses messages over 1 MiB)."""
        if len(text_data) > 4096:
            return None
        try:
            return parsing.loads_json(text_data)
        except parsing.InputError:
            return None

    async def receive_json(self, content, **kwargs):
        # Keep-alive from the browser; nothing else is accepted from it.
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def cluster_changed(self, event):
        if event.get("cluster") in self.cluster_ids:
            kinds = event.get("kinds", [])
            body = {"type": "changed", "cluster": event["cluster"], "kinds": kinds}
            if isinstance(event.get("written"), (int, float)):
                body["written"] = event["written"]
            await self.send_json(body)
            if "cluster" in kinds and self.follow_state:
                try:
                    await self._send_state()
                except DatabaseError as exc:  # the periodic check sends it a moment later
                    logger.warning("live updates: could not read the clusters' state: %s", exc)
