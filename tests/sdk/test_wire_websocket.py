"""The WebSocket transport: a real server on 127.0.0.1 and clients connecting to it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langbot_sdk.protocol import ErrorCode
from langbot_sdk.wire import (
    MAX_WIRE_MESSAGE_BYTES,
    CallInfo,
    Connection,
    Transport,
    WebSocketServerHandle,
    WireError,
    connect_websocket,
    serve_websocket,
)

pytestmark = pytest.mark.asyncio

TOKEN = "s3cret-token"


async def echo(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
    return {"echo": data}


async def count(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
    for i in range(data["n"]):
        yield {"i": i}


async def ask_client(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
    return {"client_said": await info.connection.call("whoami", {})}


class RuntimeServer:
    """A wire server like a remote runtime: each connection gets a Connection with the handlers."""

    def __init__(self) -> None:
        self.connections: list[Connection] = []
        self.handle: WebSocketServerHandle | None = None

    async def on_transport(self, transport: Transport) -> None:
        connection = Connection(
            transport, handlers={"echo": echo, "count": count, "ask_client": ask_client}, name="server"
        )
        self.connections.append(connection)
        await connection.start()
        await connection.wait_closed()

    @property
    def url(self) -> str:
        assert self.handle is not None
        return f"ws://127.0.0.1:{self.handle.port}"


@pytest.fixture
async def server() -> AsyncIterator[RuntimeServer]:
    runtime = RuntimeServer()
    runtime.handle = await serve_websocket("127.0.0.1", 0, runtime.on_transport, token=TOKEN)
    yield runtime
    for connection in runtime.connections:
        await connection.close()
    await runtime.handle.close()


async def receive_json(transport: Transport) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(await asyncio.wait_for(transport.receive(), 10))
    return decoded


async def test_calls_streams_and_callbacks_work_over_websocket(server):
    async def whoami(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return {"name": "host"}

    transport = await connect_websocket(server.url, token=TOKEN)
    async with Connection(transport, handlers={"whoami": whoami}, name="client") as client:
        echoed = await client.call("echo", {"text": "über"})
        items = [item["i"] async for item in client.stream("count", {"n": 30})]
        nested = await client.call("ask_client", {})
        many = await asyncio.gather(*(client.call("echo", {"k": k}) for k in range(100)))

    assert server.handle is not None
    assert server.handle.port > 0
    assert echoed == {"echo": {"text": "über"}}
    assert items == list(range(30))
    assert nested == {"client_said": {"name": "host"}}
    assert [m["echo"]["k"] for m in many] == list(range(100))


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_a_client_without_the_right_token_is_refused(server, token):
    with pytest.raises(WireError) as caught:
        await connect_websocket(server.url, token=token)

    assert caught.value.error.code == ErrorCode.UNAUTHORIZED
    assert server.connections == []


async def test_connecting_to_nothing_is_a_retryable_runtime_error():
    handle = await serve_websocket("127.0.0.1", 0, lambda transport: asyncio.sleep(0))
    port = handle.port
    await handle.close()

    with pytest.raises(WireError) as caught:
        await connect_websocket(f"ws://127.0.0.1:{port}")

    assert caught.value.error.code == ErrorCode.RUNTIME_ERROR
    assert caught.value.error.retryable is True


async def test_bad_messages_get_error_frames_and_the_connection_keeps_working(server):
    transport = await connect_websocket(server.url, token=TOKEN)
    oversize = b'{"seq_id":12,"action":"echo","data":{"blob":"' + b"z" * MAX_WIRE_MESSAGE_BYTES + b'"}}'

    await transport.send(b"garbage")
    not_json = await receive_json(transport)
    await transport.send(b"42")
    not_object = await receive_json(transport)
    await transport.send(oversize)
    too_big = await receive_json(transport)
    await transport.send(b'{"seq_id": 13, "action": "echo", "data": {"fine": true}}')
    good = await receive_json(transport)

    assert (not_json["seq_id"], not_json["code"], not_json["data"]["error"]["code"]) == (
        None,
        1,
        "invalid_argument",
    )
    assert (not_object["seq_id"], not_object["data"]["error"]["code"]) == (None, "invalid_argument")
    assert (too_big["seq_id"], too_big["data"]["error"]["code"]) == (12, "payload_too_large")
    assert good["seq_id"] == 13
    assert good["data"] == {"echo": {"fine": True}}
    await transport.close()


async def test_server_going_away_fails_the_clients_pending_calls():
    release = asyncio.Event()

    async def on_transport(transport: Transport) -> None:
        async def hold(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
            release.set()
            await asyncio.sleep(3600)
            return {}

        connection = Connection(transport, handlers={"hold": hold})
        await connection.start()
        await release.wait()
        await connection.close()

    handle = await serve_websocket("127.0.0.1", 0, on_transport)
    client = Connection(await connect_websocket(f"ws://127.0.0.1:{handle.port}"))
    await client.start()

    with pytest.raises(WireError) as caught:
        await asyncio.wait_for(client.call("hold", {}), 10)

    assert caught.value.error.code == ErrorCode.RUNTIME_ERROR
    assert caught.value.error.message == "connection closed"
    await asyncio.wait_for(client.wait_closed(), 5)
    await handle.close()
