"""Behaviour of the multiplexed wire Connection, over an in-memory transport pair."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from langbot_sdk.protocol import AgentAPIException, ErrorCode
from langbot_sdk.wire import (
    CallInfo,
    Connection,
    MemoryTransport,
    WireError,
    memory_transport_pair,
)

pytestmark = pytest.mark.asyncio


async def echo(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
    return {"echo": data, "action": info.action}


async def count(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
    for i in range(data["n"]):
        if data.get("yield_between"):
            await asyncio.sleep(0)
        yield {"stream": data.get("stream"), "i": i}


async def sleep_forever(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {}


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Connection, Connection]]:
    """A client and a server Connection wired together; the server knows echo/count/sleep."""
    left, right = memory_transport_pair()
    server = Connection(right, handlers={"echo": echo, "count": count, "sleep": sleep_forever}, name="server")
    client = Connection(left, name="client")
    await server.start()
    await client.start()
    yield client, server
    await client.close()
    await server.close()


@pytest.fixture
async def raw_peer() -> AsyncIterator[tuple[MemoryTransport, Connection]]:
    """A raw transport talking to a server Connection, to send frames a Connection would never send."""
    left, right = memory_transport_pair()
    server = Connection(right, handlers={"echo": echo}, max_frame_bytes=1000, name="server")
    await server.start()
    yield left, server
    await server.close()


async def eventually(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


async def drain_into(stream: AsyncIterator[dict[str, Any]], received: list[dict[str, Any]]) -> None:
    async for item in stream:
        received.append(item)


async def receive_json(transport: MemoryTransport) -> dict[str, Any]:
    frame = await asyncio.wait_for(transport.receive(), 5)
    decoded: dict[str, Any] = json.loads(frame)
    return decoded


async def test_unary_call_returns_the_handlers_result(pair):
    client, _ = pair

    result = await client.call("echo", {"text": "hi", "n": [1, 2]})

    assert result == {"echo": {"text": "hi", "n": [1, 2]}, "action": "echo"}
    assert client.pending_calls == 0


async def test_stream_yields_every_item_in_order_then_ends(pair):
    client, _ = pair

    items = [item async for item in client.stream("count", {"n": 5})]

    assert [item["i"] for item in items] == [0, 1, 2, 3, 4]
    assert client.pending_calls == 0


async def test_empty_stream_ends_without_items(pair):
    client, _ = pair

    items = [item async for item in client.stream("count", {"n": 0})]

    assert items == []


async def test_two_hundred_interleaved_streams_keep_their_own_order(pair):
    client, _ = pair

    async def consume(stream_id: int) -> list[tuple[Any, int]]:
        data = {"n": 20 + stream_id % 7, "stream": stream_id, "yield_between": True}
        return [(item["stream"], item["i"]) async for item in client.stream("count", data)]

    results = await asyncio.gather(*(consume(s) for s in range(200)))

    for stream_id, items in enumerate(results):
        assert items == [(stream_id, i) for i in range(20 + stream_id % 7)]
    assert client.pending_calls == 0


async def test_many_concurrent_unary_calls_each_get_their_own_answer(pair):
    client, _ = pair

    results = await asyncio.gather(*(client.call("echo", {"k": k}) for k in range(500)))

    assert [r["echo"]["k"] for r in results] == list(range(500))


async def test_a_slow_handler_does_not_block_other_calls(pair):
    client, _ = pair
    slow = asyncio.ensure_future(client.call("sleep", {}))

    result = await asyncio.wait_for(client.call("echo", {"fast": True}), 5)

    assert result["echo"] == {"fast": True}
    assert not slow.done()
    slow.cancel()


async def test_a_handler_can_call_back_the_peer_while_serving(pair):
    client, server = pair

    async def whoami(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return {"name": "client", "asked_for": data["run_id"]}

    async def ask(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        answer = await info.connection.call("whoami", {"run_id": data["run_id"]})
        yield {"peer": answer["name"]}
        yield {"run_id": answer["asked_for"]}

    client.register("whoami", whoami)
    server.register("ask", ask)

    items = [item async for item in client.stream("ask", {"run_id": "r1"})]

    assert items == [{"peer": "client"}, {"run_id": "r1"}]


async def test_a_handler_error_reaches_the_caller_with_its_code(pair):
    client, server = pair

    async def refuse(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        raise AgentAPIException.unauthorized("model not allowed", model_id="m1")

    server.register("refuse", refuse)

    with pytest.raises(WireError) as caught:
        await client.call("refuse", {})

    assert caught.value.error.code == ErrorCode.UNAUTHORIZED
    assert caught.value.error.message == "model not allowed"
    assert caught.value.error.details == {"model_id": "m1"}
    assert isinstance(caught.value, AgentAPIException)


async def test_an_unexpected_handler_exception_becomes_runtime_error(pair):
    client, server = pair

    async def crash(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        raise KeyError("secret-internal-detail")

    server.register("crash", crash)

    with pytest.raises(WireError) as caught:
        await client.call("crash", {})

    assert caught.value.error.code == ErrorCode.RUNTIME_ERROR
    assert "secret-internal-detail" not in caught.value.error.message


async def test_a_stream_error_arrives_after_the_items_sent_before_it(pair):
    client, server = pair

    async def fail_midway(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        yield {"i": 0}
        yield {"i": 1}
        raise AgentAPIException.rate_limited("slow down")

    server.register("fail_midway", fail_midway)
    received: list[dict[str, Any]] = []

    with pytest.raises(WireError) as caught:
        await drain_into(client.stream("fail_midway", {}), received)

    assert received == [{"i": 0}, {"i": 1}]
    assert caught.value.error.code == ErrorCode.RATE_LIMITED
    assert caught.value.error.retryable is True
    assert client.pending_calls == 0


async def test_unknown_action_answers_not_found(pair):
    client, _ = pair

    with pytest.raises(WireError) as caught:
        await client.call("no_such_action", {})

    assert caught.value.error.code == ErrorCode.NOT_FOUND
    assert "no_such_action" in caught.value.error.message


async def test_call_timeout_raises_deadline_exceeded_and_drops_the_late_answer(pair):
    client, server = pair
    release = asyncio.Event()

    async def late(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        await release.wait()
        return {"late": True}

    server.register("late", late)

    with pytest.raises(WireError) as caught:
        await client.call("late", {}, timeout=0.05)
    assert caught.value.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert client.pending_calls == 0

    release.set()
    await eventually(lambda: server.serving_calls == 0)
    assert await client.call("echo", {"after": 1}) == {"echo": {"after": 1}, "action": "echo"}


async def test_stream_timeout_bounds_the_whole_stream(pair):
    client, server = pair

    async def trickle(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        for i in range(1000):
            yield {"i": i}
            await asyncio.sleep(0.01)

    server.register("trickle", trickle)
    received: list[dict[str, Any]] = []

    with pytest.raises(WireError) as caught:
        await drain_into(client.stream("trickle", {}, timeout=0.2), received)

    assert caught.value.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert 0 < len(received) < 1000
    assert client.pending_calls == 0


async def test_leaving_a_stream_early_releases_it_and_later_frames_are_dropped(pair):
    client, server = pair

    async def endless(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        i = 0
        while True:
            yield {"i": i}
            i += 1
            await asyncio.sleep(0)

    server.register("endless", endless)

    async for item in client.stream("endless", {}):
        if item["i"] == 2:
            break
    stream = client.stream("endless", {})
    first = await anext(stream)
    await stream.aclose()

    assert first == {"i": 0}
    assert client.pending_calls == 0
    await asyncio.sleep(0.05)  # the server keeps streaming into the void meanwhile
    assert client.pending_calls == 0
    assert (await client.call("echo", {"still": "works"}))["echo"] == {"still": "works"}


async def test_closing_fails_pending_calls_and_streams_and_cancels_handlers(pair):
    client, server = pair
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hold(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    server.register("hold", hold)
    call = asyncio.ensure_future(client.call("hold", {}))
    stream_items: list[dict[str, Any]] = []
    stream = asyncio.ensure_future(
        drain_into(client.stream("count", {"n": 10**9, "yield_between": True}), stream_items)
    )
    await started.wait()
    await eventually(lambda: bool(stream_items))

    await server.close()

    for pending in (call, stream):
        with pytest.raises(WireError) as caught:
            await asyncio.wait_for(pending, 5)
        assert caught.value.error.code == ErrorCode.RUNTIME_ERROR
        assert caught.value.error.message == "connection closed"
    assert cancelled.is_set()
    await asyncio.wait_for(client.wait_closed(), 5)
    await asyncio.wait_for(server.wait_closed(), 5)
    assert client.closed
    assert server.closed


async def test_calls_on_a_closed_connection_fail_immediately(pair):
    client, _ = pair
    await client.close()

    with pytest.raises(WireError) as caught:
        await client.call("echo", {})

    assert caught.value.error.message == "connection closed"


async def test_an_oversize_request_is_refused_locally_and_nothing_is_sent():
    left, right = memory_transport_pair()
    received: list[dict[str, Any]] = []

    async def record(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        received.append(data)
        return {}

    server = Connection(right, handlers={"record": record})
    client = Connection(left, max_frame_bytes=1000)
    await server.start()
    await client.start()

    with pytest.raises(WireError) as caught:
        await client.call("record", {"blob": "x" * 2000})
    await client.call("record", {"blob": "small"})

    assert caught.value.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert received == [{"blob": "small"}]
    await client.close()
    await server.close()


async def test_an_oversize_handler_result_reaches_the_caller_as_payload_too_large():
    left, right = memory_transport_pair()

    async def huge(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        yield {"ok": True}
        yield {"blob": "x" * 5000}

    server = Connection(right, handlers={"huge": huge}, max_frame_bytes=1000)
    client = Connection(left)
    await server.start()
    await client.start()
    received: list[dict[str, Any]] = []

    with pytest.raises(WireError) as caught:
        await drain_into(client.stream("huge", {}), received)

    assert received == [{"ok": True}]
    assert caught.value.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    await client.close()
    await server.close()


async def test_bad_frames_get_error_frames_and_the_connection_keeps_working(raw_peer):
    raw, _server = raw_peer
    big_request = b'{"seq_id":41,"action":"echo","data":{"blob":"' + b"x" * 2000 + b'"}}'

    await raw.send(b"this is not json")
    not_json = await receive_json(raw)
    await raw.send(b"[1, 2, 3]")
    not_object = await receive_json(raw)
    await raw.send(b'{"seq_id": 7, "action": 5, "data": {}}')
    bad_action = await receive_json(raw)
    await raw.send(big_request)
    oversize = await receive_json(raw)
    await raw.send(b'{"seq_id": 8, "action": "echo", "data": {"ok": 1}}')
    good = await receive_json(raw)

    assert (not_json["seq_id"], not_json["code"], not_json["chunk_status"]) == (None, 1, "end")
    assert not_json["data"]["error"]["code"] == "invalid_argument"
    assert (not_object["seq_id"], not_object["data"]["error"]["code"]) == (None, "invalid_argument")
    assert (bad_action["seq_id"], bad_action["data"]["error"]["code"]) == (7, "invalid_argument")
    assert (oversize["seq_id"], oversize["data"]["error"]["code"]) == (41, "payload_too_large")
    assert good == {
        "seq_id": 8,
        "code": 0,
        "message": "",
        "data": {"echo": {"ok": 1}, "action": "echo"},
        "chunk_status": "end",
    }


async def test_error_notices_and_unknown_responses_are_not_answered(raw_peer):
    raw, _server = raw_peer

    await raw.send(b'{"seq_id": null, "code": 1, "message": "peer notice", "data": {}, "chunk_status": "end"}')
    await raw.send(b'{"seq_id": 999, "code": 0, "message": "", "data": {}, "chunk_status": "end"}')
    await raw.send(b'{"seq_id": 9, "action": "echo", "data": {}}')
    first_reply = await receive_json(raw)

    assert first_reply["seq_id"] == 9
    assert first_reply["code"] == 0


async def test_an_oversize_response_fails_only_the_call_it_answers():
    raw, right = memory_transport_pair()
    client = Connection(right, max_frame_bytes=1000)
    await client.start()
    big_call = asyncio.ensure_future(client.call("fetch", {}))
    small_call = asyncio.ensure_future(client.call("fetch", {}))
    big_seq = (await receive_json(raw))["seq_id"]
    small_seq = (await receive_json(raw))["seq_id"]

    await raw.send(
        b'{"seq_id":%d,"code":0,"message":"","data":{"blob":"%s"},"chunk_status":"end"}' % (big_seq, b"x" * 2000)
    )
    await raw.send(b'{"seq_id":%d,"code":0,"message":"","data":{"ok":1},"chunk_status":"end"}' % small_seq)

    with pytest.raises(WireError) as caught:
        await asyncio.wait_for(big_call, 5)
    assert caught.value.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert await asyncio.wait_for(small_call, 5) == {"ok": 1}
    notice = await receive_json(raw)
    assert notice["seq_id"] is None
    assert notice["data"]["error"]["code"] == "payload_too_large"
    await client.close()
