"""The live-update websocket: authenticated, origin-checked, and only for clusters the user may view."""
import uuid

import pytest
from channels.testing import WebsocketCommunicator

from console.asgi import application
from nodepools import hints
from nodepools.consumers import LiveConsumer

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
    assert await comm.receive_json_from() == {"type": "hello", "clusters": [org.cluster.pk]}
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
