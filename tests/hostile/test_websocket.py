"""The live-update websocket reads what a browser sends with the same bounds: a deep or large JSON message is
nothing to it, and the connection keeps answering keep-alives."""
from __future__ import annotations

import asyncio

import pytest

from tests.hostile.conftest import DEEP_JSON

pytestmark = pytest.mark.django_db(transaction=True)


async def _exchange(session: str) -> list:
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    communicator = WebsocketCommunicator(application, "/ws/live/", headers=[
        (b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", f"sessionid={session}".encode())])
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await communicator.receive_json_from(timeout=5)  # hello
    await communicator.send_to(text_data=DEEP_JSON)
    await communicator.send_to(text_data='{"type": "ping", "padding": "' + "x" * 10_000 + '"}')
    await communicator.send_to(text_data='{"type": "ping"}')
    answer = await communicator.receive_json_from(timeout=5)
    await communicator.disconnect()
    return answer


def test_deep_or_large_messages_are_ignored_and_keep_alives_answered(org, users, client):
    client.force_login(users["sysadmin"])
    assert asyncio.run(_exchange(client.cookies["sessionid"].value)) == {"type": "pong"}
