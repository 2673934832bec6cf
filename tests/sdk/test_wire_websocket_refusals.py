"""A refused runtime connection says where from (runtime's log) and where to (host's error), so an
operator can tell a host with a stale LANGBOT_RUNTIME_TOKEN from a stranger."""

from __future__ import annotations

import asyncio
import logging

import pytest

from langbot_sdk.wire.errors import WireError
from langbot_sdk.wire.websocket import connect_websocket, serve_websocket


@pytest.mark.parametrize(("token", "said"), [(None, "no token"), ("stale", "wrong token")])
async def test_a_refused_token_is_logged_with_the_peer_and_explained_to_the_client(caplog, token, said):
    handle = await serve_websocket("127.0.0.1", 0, lambda transport: asyncio.sleep(0), token="right")
    url = f"ws://127.0.0.1:{handle.port}"
    try:
        with caplog.at_level(logging.WARNING, logger="langbot_sdk.wire.websocket"), pytest.raises(WireError) as caught:
            await connect_websocket(url, token=token)
    finally:
        await handle.close()

    assert url in caught.value.error.message
    assert "LANGBOT_RUNTIME_TOKEN" in caught.value.error.message
    [refusal] = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert refusal.startswith("refused a connection from 127.0.0.1:")
    assert refusal.endswith(said)
