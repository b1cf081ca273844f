"""The live-update websocket: authenticated, origin-checked, and only for clusters the user may view."""
import re
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from console.asgi import application
from nodepools import hints
from nodepools.consumers import STATE_SECONDS, LiveConsumer
from tests.pages import text

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user, query=""):
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/{query}")
    comm.scope["user"] = user
    return comm


@pytest.fixture
def other(transactional_db):
    from nodepools import services

    return services.cluster_create(actor=None, name="other")


async def test_hints_of_a_visible_cluster_reach_the_browser(org, users):
    comm = communicator(users["rnd_viewer"])
    connected, _ = await comm.connect()
    assert connected
    seq = await database_sync_to_async(lambda: hints.marks([org.cluster.pk])[org.cluster.pk])()
    # The hello carries the clusters' marks: a page rendered at older ones refetches (it missed a hint).
    assert await comm.receive_json_from() == {"type": "hello", "clusters": [org.cluster.pk],
                                              "marks": {str(org.cluster.pk): seq}}
    await hints.publish_async(org.cluster.pk, ["nodes", "pods"])
    assert await comm.receive_json_from(timeout=1) == {"type": "changed", "cluster": org.cluster.pk,
                                                        "kinds": ["nodes", "pods"]}
    await comm.disconnect()


async def test_a_user_joins_only_clusters_it_may_view(org, users, other):
    comm = communicator(users["rnd_admin"], f"?clusters={org.cluster.pk},{other.pk}")
    await comm.connect()
    assert (await comm.receive_json_from())["clusters"] == [org.cluster.pk]
    await hints.publish_async(other.pk, ["nodes"])
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_system_administrator_may_follow_every_cluster_or_a_chosen_one(org, users, other):
    comm = communicator(users["sysadmin"], f"?clusters={other.pk}")
    await comm.connect()
    assert (await comm.receive_json_from())["clusters"] == [other.pk]
    await hints.publish_async(org.cluster.pk, ["nodes"])
    assert await comm.receive_nothing(timeout=0.3)
    await hints.publish_async(other.pk, ["pools"])
    assert (await comm.receive_json_from(timeout=1))["kinds"] == ["pools"]
    await comm.disconnect()


async def test_a_user_without_roles_hears_nothing(org, users):
    comm = communicator(users["nobody"])
    await comm.connect()
    assert (await comm.receive_json_from())["clusters"] == []
    await hints.publish_async(org.cluster.pk, ["nodes"])
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_anonymous_connections_are_refused(org):
    from django.contrib.auth.models import AnonymousUser

    comm = communicator(AnonymousUser())
    connected, code = await comm.connect()
    assert not connected and code == 4401


async def test_the_asgi_application_checks_the_origin(org):
    comm = WebsocketCommunicator(application, "/ws/live/", headers=[(b"origin", b"https://evil.example"),
                                                                      (b"host", b"127.0.0.1")])
    connected, _ = await comm.connect()
    assert not connected


async def test_the_asgi_application_refuses_a_connection_without_a_session(org):
    comm = WebsocketCommunicator(application, "/ws/live/", headers=[(b"origin", b"http://127.0.0.1"),
                                                                      (b"host", b"127.0.0.1")])
    connected, code = await comm.connect()
    assert not connected and code == 4401


async def test_the_asgi_application_authenticates_with_the_session_cookie(org, users, client):
    from asgiref.sync import sync_to_async
    from django.conf import settings

    await sync_to_async(client.force_login)(users["cluster_viewer"])
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    comm = WebsocketCommunicator(application, "/ws/live/", headers=[
        (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)])
    connected, _ = await comm.connect()
    assert connected
    assert (await comm.receive_json_from())["clusters"] == [org.cluster.pk]
    await comm.disconnect()


async def test_ping_gets_a_pong_and_nothing_else_is_accepted(org, users):
    comm = communicator(users["sysadmin"])
    await comm.connect()
    await comm.receive_json_from()
    await comm.send_json_to({"type": "ping"})
    assert await comm.receive_json_from() == {"type": "pong"}
    await comm.send_json_to({"type": "cluster.changed", "cluster": org.cluster.pk})
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


@pytest.mark.redis
async def test_hints_travel_through_redis(org, users, settings):
    # A prefix of its own, so that other test runs sharing the Redis server cannot interfere.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [settings.REDIS_URL],
                                                      "prefix": f"test-{uuid.uuid4().hex[:8]}"}}}
    comm = communicator(users["cluster_viewer"])
    await comm.connect()
    await comm.receive_json_from()
    await hints.publish_async(org.cluster.pk, ["nodes"])
    assert await comm.receive_json_from(timeout=3) == {"type": "changed", "cluster": org.cluster.pk, "kinds": ["nodes"]}
    await comm.disconnect()


@pytest.mark.redis
async def test_hints_travel_through_redis_pubsub_as_configured_to_every_open_page_of_the_cluster_only(
        org, users, settings, other):
    # The settings' layer (Redis pub/sub: published once, handed to each process's open pages in memory).
    from django.conf import settings as live_settings

    assert live_settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.pubsub.RedisPubSubChannelLayer"
    settings.CHANNEL_LAYERS = {"default": {**live_settings.CHANNEL_LAYERS["default"],
                                           "CONFIG": {"hosts": settings.REDIS_CHANNEL_HOSTS,
                                                      "prefix": f"test-{uuid.uuid4().hex[:8]}"}}}
    pages = [communicator(users["cluster_viewer"]) for _ in range(3)]
    for comm in pages:
        await comm.connect()
        await comm.receive_json_from()
    await hints.publish_async(other.pk, ["nodes"])  # a cluster none of them may view
    await hints.publish_async(org.cluster.pk, ["nodes"], 1700000000.5)
    for comm in pages:
        assert await comm.receive_json_from(timeout=3) == {"type": "changed", "cluster": org.cluster.pk,
                                                            "kinds": ["nodes"], "written": 1700000000.5}
        assert await comm.receive_nothing(timeout=0.2)
        await comm.disconnect()


@pytest.mark.redis
async def test_a_page_idle_longer_than_redis_blocking_receive_still_gets_hints(org, users, settings):
    """The consumer waits on Redis in blocking receives of 5 s: a page nobody touches for longer must
    keep its connection and still get the next hint (the hosts as the settings give them)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": settings.REDIS_CHANNEL_HOSTS,
                                                      "prefix": f"test-{uuid.uuid4().hex[:8]}"}}}
    comm = communicator(users["cluster_viewer"])
    await comm.connect()
    await comm.receive_json_from()
    assert await comm.receive_nothing(timeout=11)  # two blocking receives come back empty meanwhile
    await hints.publish_async(org.cluster.pk, ["nodes"])
    assert await comm.receive_json_from(timeout=3) == {"type": "changed", "cluster": org.cluster.pk, "kinds": ["nodes"]}
    await comm.disconnect()


async def test_without_a_shared_layer_changes_written_by_another_process_still_reach_the_browser(org, users, settings):
    # The sync runs in its own process; with the in-memory layer only the database connects them.
    from channels.db import database_sync_to_async

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert not hints.layer_spans_processes()
    comm = communicator(users["rnd_viewer"])
    await comm.connect()
    await comm.receive_json_from()
    await comm.receive_nothing(timeout=0.6)  # no mark moved: no hint
    await database_sync_to_async(hints.record)(org.cluster.pk)
    assert await comm.receive_json_from(timeout=2) == {
        "type": "changed", "cluster": org.cluster.pk, "kinds": sorted(hints.KINDS)}
    await comm.disconnect()


# --- The clusters' state (badge and banner of every open page) ---------------------------------------

def _set_cluster(pk, **fields):
    from channels.db import database_sync_to_async

    from nodepools.models import Cluster

    return database_sync_to_async(lambda: Cluster.objects.filter(pk=pk).update(**fields))()


async def _next_state(comm, timeout):
    message = await comm.receive_json_from(timeout=timeout)
    while message["type"] != "cluster":
        message = await comm.receive_json_from(timeout=timeout)
    return message


async def test_a_page_asking_for_the_state_gets_it_at_once(org, users):
    from django.utils import timezone

    synced = timezone.now()
    await _set_cluster(org.cluster.pk, connection_state="connected", last_full_sync=synced)
    comm = communicator(users["cluster_viewer"], "?state=1")
    await comm.connect()
    assert (await comm.receive_json_from())["type"] == "hello"
    message = await comm.receive_json_from(timeout=1)
    assert message["type"] == "cluster"
    [state] = message["clusters"]
    assert state["id"] == org.cluster.pk and state["state"] == "connected" and state["stale"] is False
    assert state["last_full_sync"] == synced.isoformat()
    assert f"{org.cluster.name}: connected" in message["badges"]
    assert f'data-last-full-sync="{synced.isoformat()}"' in message["badges"]
    assert "stale" not in message["banners"] and "full sync" not in message["banners"]
    await comm.disconnect()


async def test_a_cluster_turning_unreachable_reaches_the_page_within_seconds_without_any_hint(org, users):
    # A sync in another process, with the in-memory layer, or a state written without a hint: the
    # consumer re-reads the state by itself.
    from django.utils import timezone

    synced = timezone.now() - timezone.timedelta(minutes=3)
    await _set_cluster(org.cluster.pk, connection_state="connected", last_full_sync=synced)
    comm = communicator(users["rnd_viewer"], "?state=1")
    await comm.connect()
    await comm.receive_json_from()
    assert (await _next_state(comm, 1))["clusters"][0]["stale"] is False
    await _set_cluster(org.cluster.pk, connection_state="unreachable", last_error="connection refused")
    message = await _next_state(comm, STATE_SECONDS + 1.5)
    [state] = message["clusters"]
    assert state["stale"] is True and state["stale_reason"] == "unreachable"
    assert state["stale_since"] == synced.isoformat()
    assert f"Cluster {org.cluster.name} is unreachable" in message["banners"]
    assert f"stale since <time datetime=\"{synced.isoformat()}\">" in message["banners"]
    assert "connection refused" in message["banners"]
    assert "cluster-stale" in message["badges"]

    # Recovery clears it, and the new last full sync is shown.
    recovered = timezone.now()
    await _set_cluster(org.cluster.pk, connection_state="connected", last_full_sync=recovered)
    [state] = (await _next_state(comm, STATE_SECONDS + 1.5))["clusters"]
    assert state["stale"] is False and state["last_full_sync"] == recovered.isoformat()
    await comm.disconnect()


async def test_a_cluster_hint_sends_the_new_state_at_once(org, users):
    comm = communicator(users["sysadmin"], f"?clusters={org.cluster.pk}&state=1")
    await comm.connect()
    await comm.receive_json_from()
    await _next_state(comm, 1)
    await _set_cluster(org.cluster.pk, connection_state="degraded")
    await hints.publish_async(org.cluster.pk, ["cluster"])
    assert (await comm.receive_json_from(timeout=0.5))["type"] == "changed"
    message = await comm.receive_json_from(timeout=0.5)  # well before the periodic check
    assert message["type"] == "cluster" and message["clusters"][0]["stale_reason"] == "degraded"
    assert "is degraded" in message["banners"]
    await comm.disconnect()


async def test_a_leader_that_stopped_reporting_makes_the_figures_stale(org, users):
    # A hung sync leader sends no hint at all; only its old heartbeat tells.
    from django.utils import timezone

    await _set_cluster(org.cluster.pk, connection_state="connected", leader_heartbeat=timezone.now())
    comm = communicator(users["cluster_viewer"], "?state=1")
    await comm.connect()
    await comm.receive_json_from()
    assert (await _next_state(comm, 1))["clusters"][0]["stale"] is False
    # A fresh heartbeat every few seconds is no change: nothing is sent for it.
    await _set_cluster(org.cluster.pk, leader_heartbeat=timezone.now())
    assert await comm.receive_nothing(timeout=STATE_SECONDS + 0.5)
    hung = timezone.now() - timezone.timedelta(seconds=45)
    await _set_cluster(org.cluster.pk, leader_heartbeat=hung)
    message = await _next_state(comm, STATE_SECONDS + 1.5)
    [state] = message["clusters"]
    assert state["stale"] is True and state["stale_reason"] == "no-heartbeat"
    assert state["stale_since"] == hung.isoformat()
    assert "not being synced" in message["banners"] and "has not reported for over 30 seconds" in message["banners"]
    await comm.disconnect()


async def test_the_state_covers_only_clusters_the_user_may_view(org, users, other):
    await _set_cluster(other.pk, connection_state="unreachable")
    comm = communicator(users["rnd_admin"], f"?clusters={org.cluster.pk},{other.pk}&state=1")
    await comm.connect()
    await comm.receive_json_from()
    message = await _next_state(comm, 1)
    assert [c["id"] for c in message["clusters"]] == [org.cluster.pk]
    assert "other" not in message["badges"] + message["banners"]
    await comm.disconnect()


async def test_without_asking_for_the_state_the_old_protocol_is_unchanged(org, users):
    comm = communicator(users["cluster_viewer"])
    await comm.connect()
    await comm.receive_json_from()
    await _set_cluster(org.cluster.pk, connection_state="unreachable")
    assert await comm.receive_nothing(timeout=STATE_SECONDS + 0.5)
    await comm.disconnect()


@pytest.mark.parametrize("page", ["home", "node-list", "pool-list"])
async def test_pages_show_the_stale_banner_and_badge_when_rendered(org, users, client, page):
    # Without JavaScript, or before the websocket opens, the page itself says it.
    from asgiref.sync import sync_to_async
    from django.urls import reverse
    from django.utils import timezone

    synced = timezone.now() - timezone.timedelta(minutes=5)
    await _set_cluster(org.cluster.pk, connection_state="unreachable", last_full_sync=synced)

    def get():
        client.force_login(users["cluster_viewer"])
        return client.get(reverse(page)).content.decode()

    html = await sync_to_async(get)()
    assert f"Cluster {org.cluster.name} is unreachable" in html
    assert f'stale since <time datetime="{synced.isoformat()}">' in html
    assert 'class="cluster-badge cluster-unreachable cluster-stale"' in html
    # The header says how old the figures are, once: since they went stale.
    assert re.search(rf'<span id="data-age" class="data-age data-age-stale" data-updated-at="{re.escape(synced.isoformat())}"', html)
    assert html.count('id="data-age"') == 1 and "updated <time" in html and "5 min ago" in html
    # The time of the last full sync is no measure of the figures' age: it is only in the badge's tooltip.
    assert "full sync" not in text(html).lower()


def test_the_age_of_the_figures_is_said_in_words_from_their_moment():
    from datetime import datetime, timedelta, timezone

    assert [hints.age_text(s) for s in (0, 4.9, 59, 60, 3599, 3600, 47 * 3600, 48 * 3600, 72 * 3600)] == [
        "0 s ago", "4 s ago", "59 s ago", "1 min ago", "59 min ago", "1 h ago", "47 h ago", "2 days ago", "3 days ago"]
    now = datetime(2026, 12, 1, 20, 6, tzinfo=timezone.utc)
    current = {"name": "a", "stale": False, "stale_since": None, "last_full_sync": "2026-12-01T19:51:25+00:00",
               "last_full_sync_text": "19:51:25 UTC"}
    # A current mirror: as of now, however long ago its last full sync was.
    age = hints.data_age([current], now)
    assert age["updated_at"] == now.isoformat() and age["text"] == "0 s ago" and not age["stale"]
    # A stale cluster: since its figures stopped being current (the oldest of the page's clusters).
    since = now - timedelta(seconds=95)
    stale = {**current, "name": "b", "stale": True, "stale_since": since.isoformat()}
    age = hints.data_age([current, stale], now)
    assert age["updated_at"] == since.isoformat() and age["text"] == "1 min ago" and age["stale"]
    # Before a first full sync there is no age to tell; a cluster not synced yet does not hide the others'.
    pending = {**current, "name": "c", "last_full_sync": None, "last_full_sync_text": ""}
    assert hints.data_age([pending], now)["updated_at"] == ""
    assert hints.data_age([pending, current], now)["updated_at"] == now.isoformat()
    assert hints.data_age([], now) is None
