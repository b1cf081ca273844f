"""The live-update websocket (nodepools/consumers.py) refuses foreign origins and anonymous users, and joins only
the clusters the user may see (the permission matrix's roles, tests/test_permission_matrix.py)."""
from __future__ import annotations

import asyncio

import pytest

from nodepools import consumers  # noqa: F401  (a missing consumer fails, never skips)


def _communicator(user, origin=b"http://testserver", query="", session_client=None):
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    headers = [(b"origin", origin), (b"host", b"testserver")]
    if session_client is not None:
        headers.append((b"cookie", f"sessionid={session_client.cookies['sessionid'].value}".encode()))
    return WebsocketCommunicator(application, f"/ws/live/{query}", headers=headers)


async def _connect(communicator):
    connected, code = await communicator.connect(timeout=5)
    hello = await communicator.receive_json_from(timeout=5) if connected else None
    await communicator.disconnect()
    return connected, hello


@pytest.mark.django_db(transaction=True)
def test_websocket_refuses_foreign_origins_and_anonymous_users(org, users, client):
    client.force_login(users["sysadmin"])
    connected, _ = asyncio.run(_connect(_communicator(None, origin=b"https://evil.example", session_client=client)))
    assert not connected
    connected, _ = asyncio.run(_connect(_communicator(None)))
    assert not connected


@pytest.mark.django_db(transaction=True)
def test_websocket_joins_only_visible_clusters(org, users, client):
    from nodepools import services

    other = services.cluster_create(actor=None, name="other")
    client.force_login(users["rnd_admin"])
    connected, hello = asyncio.run(_connect(_communicator(None, query=f"?clusters={org.cluster.pk},{other.pk}",
                                                          session_client=client)))
    assert connected and hello["clusters"] == [org.cluster.pk]
    client.force_login(users["sysadmin"])
    connected, hello = asyncio.run(_connect(_communicator(None, session_client=client)))
    assert connected and sorted(hello["clusters"]) == sorted([org.cluster.pk, other.pk])
