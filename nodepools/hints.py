"""Change hints: "this cluster's nodes/pods/pools changed", sent over the channel layer.

The sync publishes one after each committed batch (coalesced); the live pages listen and refetch their
table through the normal view, so filters, sort and permissions always apply. A hint carries no data.
"""
from __future__ import annotations

from datetime import datetime
from typing import Iterable

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db.models import F
from django.template.loader import render_to_string
from django.utils import timezone

from common import metrics
from nodepools.models import Cluster, ConnectionState

MESSAGE_TYPE = "cluster.changed"  # handled by a consumer method `cluster_changed`
# Beyond this floor's own: the names of resources apps above register with the sync (provisioning's Karpenter
# NodePools and NodeClaims, workloads' Jobs), so that the pages showing them follow the cluster too.
KINDS = frozenset({"nodes", "pods", "pools", "quotas", "cluster", "karpenter_nodepools", "karpenter_nodeclaims", "jobs"})


def group_name(cluster_id: int) -> str:
    """The channel-layer group of one cluster's live pages."""
    return f"cluster.{cluster_id}"


def message(cluster_id: int, kinds: Iterable[str], written: float | None = None) -> dict:
    """`written`: the sync's hints say until when (Unix time) its writes are committed and covered, so
    that a watcher can tell which change a hint announces (bench/load.py checks each within a second)."""
    kinds = sorted(set(kinds) & KINDS)
    body = {"type": MESSAGE_TYPE, "cluster": cluster_id, "kinds": kinds}
    if written is not None:
        body["written"] = round(written, 6)
    return body


async def publish_async(cluster_id: int, kinds: Iterable[str], written: float | None = None) -> None:
    layer = get_channel_layer()
    if layer is not None:
        kinds = list(kinds)
        await layer.group_send(group_name(cluster_id), message(cluster_id, kinds, written))
        metrics.hint_sent(kinds)


def layer_spans_processes() -> bool:
    """Whether a hint sent here reaches consumers in other processes (Redis: yes; in-memory: no)."""
    layer = get_channel_layer()
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


def record(cluster_id: int) -> None:
    """Leave a mark in the database: the cluster's `hint_seq` counts the hints sent for it.

    Without Redis the sync and the web server share only the database: the live consumer polls the
    mark (see `LiveConsumer`). With or without Redis, a page carries the marks it was rendered at
    (`marks`), so that a hint sent between its rendering and its websocket joining is not lost.
    """
    Cluster.objects.filter(pk=cluster_id).update(hint_seq=F("hint_seq") + 1)


def marks(cluster_ids: Iterable[int]) -> dict[int, int]:
    """cluster id -> its `hint_seq` now (one query)."""
    return dict(Cluster.objects.filter(pk__in=list(cluster_ids)).values_list("pk", "hint_seq"))


def publish(cluster_id: int, kinds: Iterable[str]) -> None:
    """Send a hint from synchronous code (the sync, services after commit)."""
    async_to_sync(publish_async)(cluster_id, kinds)


# What the live pages show of a cluster's state --------------------------------------------------------
#
# A leader that hangs sends no hint, so the state is also re-read every few seconds by each live
# connection (`LiveConsumer`); these functions are the one place that says what is shown.

CLUSTER_MESSAGE = "cluster"  # {"type": "cluster", "clusters": [...], "badges": html, "banners": html}


def _when(moment, now) -> str:
    """Short and unambiguous: the time alone today, the date too otherwise (in the console's time zone)."""
    if moment is None:
        return ""
    local, today = timezone.localtime(moment), timezone.localtime(now)
    zone = local.tzname() or ""
    if local.date() == today.date():
        return f"{local:%H:%M:%S} {zone}".strip()
    return f"{local:%Y-%m-%d %H:%M} {zone}".strip()


def cluster_state(cluster, now=None) -> dict:
    """One cluster's state as the badge and the banner show it (JSON-serialisable, compared for changes)."""
    now = now or timezone.now()
    stale = cluster.stale_since(now)
    if cluster.connection_state in (ConnectionState.UNREACHABLE, ConnectionState.DEGRADED):
        reason = cluster.connection_state
    elif stale is not None:
        reason = "no-heartbeat"  # the sync's leader stopped reporting: the state in the database is old
    else:
        reason = ""
    return {
        "id": cluster.pk,
        "name": cluster.name,
        "state": cluster.connection_state,
        "state_label": ConnectionState(cluster.connection_state).label,
        "stale": stale is not None,
        "stale_reason": reason,
        "stale_since": stale.isoformat() if stale else None,
        "stale_since_text": _when(stale, now),
        "last_full_sync": cluster.last_full_sync.isoformat() if cluster.last_full_sync else None,
        "last_full_sync_text": _when(cluster.last_full_sync, now),
        "last_error": (cluster.last_error or "")[:300] if stale else "",
    }


def cluster_states(*, user, cluster_ids, now=None) -> list[dict]:
    """The states of those of `cluster_ids` the user may view, by name."""
    clusters = (Cluster.objects.restrict(user, "view").filter(pk__in=list(cluster_ids))
                .only("pk", "name", "connection_state", "last_full_sync", "last_error", "leader_heartbeat",
                      "updated").order_by("name"))
    return [cluster_state(c, now) for c in clusters]


def age_text(seconds: float) -> str:
    """How old, as the header says it: "4 s ago", "12 min ago", "3 h ago", "2 days ago" (static/js/freshness.js
    counts on with the same words)."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    return f"{days} day{'s' if days != 1 else ''} ago"


def data_age(states: list[dict], now=None) -> dict | None:
    """How old the figures of a page are, once for all its clusters (None without clusters): as of `now` while
    every cluster's mirror is current; since the oldest `stale_since` when one is stale (its figures stopped
    being current then); "not synced yet" before any first full sync. The page counts on from there
    and a live refetch makes it "now" again (static/js/freshness.js)."""
    if not states:
        return None
    now = now or timezone.now()
    stale = sorted(s["stale_since"] for s in states if s["stale"] and s["stale_since"])
    syncs = ", ".join(f"{s['name']} {s['last_full_sync_text']}" if len(states) > 1 else s["last_full_sync_text"]
                      for s in states if s["last_full_sync_text"])
    age = {"now": now.isoformat(), "stale": bool(stale), "last_full_syncs": syncs}
    if stale:
        since = datetime.fromisoformat(stale[0])
        return {**age, "updated_at": stale[0], "text": age_text((now - since).total_seconds())}
    if not any(s["last_full_sync"] for s in states):  # a cluster never synced has no figures to age
        return {**age, "updated_at": "", "text": ""}
    return {**age, "updated_at": now.isoformat(), "text": age_text(0)}


def render_cluster_states(states: list[dict]) -> dict[str, str]:
    """The top-bar badges and the banners of these states, as HTML (the same templates the page uses)."""
    return {
        "badges": render_to_string("live/cluster_badges.html", {"cluster_states": states}),
        "banners": render_to_string("live/cluster_banners.html", {"cluster_states": states}),
    }
