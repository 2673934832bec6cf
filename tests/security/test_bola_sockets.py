"""Every WebSocket route against another workspace's objects (issue 22, BOLA matrix, sockets part).

SOCKETS lists each route the ASGI application serves with where its cross-workspace attempts are tested;
a route that is not listed fails the test. The OneBot reverse socket is tried here: another workspace's
bot, under the caller's own workspace slug and with that bot's own token, is not connected.
"""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from langbot_host.asgi import application
from langbot_host.routing import platform_websocket_urlpatterns, websocket_urlpatterns
from tests.factories import BotFactory, WorkspaceFactory

SOCKETS = {
    # Another workspace's conversation answers like an unknown one, its events never arrive, cancelling its
    # run is not_found: tests/streaming/test_chat_socket_streams.py; a workspace the member lacks: 4403,
    # tests/streaming/test_chat_socket_auth.py; attachments of another workspace: test_chat_attachments.py.
    "ws/v1/chat/": "tests/streaming",
    "platforms/onebot/<slug:workspace_slug>/<slug:bot_id>/ws": "below",
    # Admits by a workspace's development token, whose runners are registered for that workspace only and
    # never listed in another's catalog: tests/runners/test_dev_runtime_socket.py; bound and run in that
    # workspace only: tests/runners/test_runner_sources.py, tests/integration/test_dev_runtime_relay.py.
    "ws/v1/dev/runtime/": "tests/runners",
    # A website visitor's socket: admitted by a one-time ticket bound to one bot and visitor, it serves that
    # visitor's own conversation and history only; another conversation, another bot's ticket or a chat
    # ticket are refused: tests/streaming/test_widget_socket.py.
    "ws/v1/widget/": "tests/streaming",
}


def test_every_socket_route_is_in_the_matrix():
    served = {str(p.pattern) for p in [*websocket_urlpatterns, *platform_websocket_urlpatterns]}

    assert served == set(SOCKETS)


@pytest.mark.django_db(transaction=True)
async def test_another_workspaces_onebot_bot_is_not_reachable_under_my_slug():
    from channels.db import database_sync_to_async

    def given() -> None:
        WorkspaceFactory.create(slug="mine")
        theirs = WorkspaceFactory.create(slug="zz-their-ws")
        BotFactory.create(
            workspace=theirs, bot_id="zz-their-bot", platform="qq", credentials={"access_token": "their-token"}
        )

    await database_sync_to_async(given)()
    headers = [(b"authorization", b"Bearer their-token")]

    under_mine = WebsocketCommunicator(application, "/platforms/onebot/mine/zz-their-bot/ws", headers=headers)
    connected_mine, _ = await under_mine.connect(timeout=5)
    under_theirs = WebsocketCommunicator(application, "/platforms/onebot/zz-their-ws/zz-their-bot/ws", headers=headers)
    connected_theirs, _ = await under_theirs.connect(timeout=5)
    await under_theirs.disconnect()

    assert connected_mine is False
    assert connected_theirs is True  # the same bot and token, under its own workspace: the test can fail
