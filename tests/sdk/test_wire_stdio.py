"""The stdio transport between a host and a real child process speaking the wire on its stdin/stdout."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from langbot_sdk.protocol import ErrorCode
from langbot_sdk.wire import (
    MAX_WIRE_MESSAGE_BYTES,
    CallInfo,
    Connection,
    FrameTooLarge,
    StdioTransport,
    WireError,
    spawn_stdio_transport,
)

pytestmark = pytest.mark.asyncio

REPO_ROOT = Path(__file__).resolve().parents[2]

CHILD_SCRIPT = """
import asyncio
import os

from langbot_sdk.wire import Connection, open_stdio_transport


async def echo(data, info):
    return {"echo": data}


async def count(data, info):
    for i in range(data["n"]):
        yield {"i": i}


async def ask_parent(data, info):
    answer = await info.connection.call("whoami", {"question": data["question"]})
    return {"parent_said": answer}


async def hold(data, info):
    await asyncio.sleep(3600)
    return {}


async def die(data, info):
    os._exit(3)


async def main():
    transport = await open_stdio_transport()
    # A careless plugin printing to stdout must not corrupt the frame stream.
    print("stray output from a plugin")
    handlers = {"echo": echo, "count": count, "ask_parent": ask_parent, "hold": hold, "die": die}
    connection = Connection(transport, handlers=handlers, name="child")
    await connection.start()
    await connection.wait_closed()


asyncio.run(main())
"""


@pytest.fixture
def child_argv(tmp_path: Path) -> list[str]:
    script = tmp_path / "echo_child.py"
    script.write_text(CHILD_SCRIPT)
    return [sys.executable, str(script)]


@pytest.fixture
async def child(child_argv: list[str]) -> AsyncIterator[tuple[StdioTransport, asyncio.subprocess.Process]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    transport, process = await spawn_stdio_transport(child_argv, env=env, cwd=str(REPO_ROOT))
    yield transport, process
    await transport.close()
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        process.kill()
        await process.wait()


async def receive_json(transport: StdioTransport) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(await asyncio.wait_for(transport.receive(), 10))
    return decoded


async def test_calls_and_streams_round_trip_through_a_child_process(child):
    transport, _ = child
    async with Connection(transport, name="host") as host:
        echoed = await host.call("echo", {"text": "héllo ✓", "n": 1})
        items = [item["i"] async for item in host.stream("count", {"n": 50})]
        many = await asyncio.gather(*(host.call("echo", {"k": k}) for k in range(100)))

    assert echoed == {"echo": {"text": "héllo ✓", "n": 1}}
    assert items == list(range(50))
    assert [m["echo"]["k"] for m in many] == list(range(100))


async def test_stray_prints_in_the_child_do_not_reach_the_frame_stream(child):
    transport, _ = child

    await transport.send(b'{"seq_id": 1, "action": "echo", "data": {"first": true}}')
    first_line = await receive_json(transport)

    assert first_line["seq_id"] == 1
    assert first_line["data"] == {"echo": {"first": True}}


async def test_the_child_can_call_the_host_while_serving_a_request(child):
    transport, _ = child

    async def whoami(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return {"name": "host", "question": data["question"]}

    async with Connection(transport, handlers={"whoami": whoami}, name="host") as host:
        result = await host.call("ask_parent", {"question": "who?"})

    assert result == {"parent_said": {"name": "host", "question": "who?"}}


async def test_bad_lines_get_error_frames_and_the_child_keeps_serving(child):
    transport, _ = child
    oversize_line = b'{"seq_id":77,"action":"echo","data":{"blob":"' + b"x" * MAX_WIRE_MESSAGE_BYTES + b'"}}'

    await transport.send(b"{not json at all")
    not_json = await receive_json(transport)
    await transport.send(b'"just a string"')
    not_object = await receive_json(transport)
    await transport.send(b'{"seq_id": 5, "data": {}}')
    missing_action = await receive_json(transport)
    await transport.send(oversize_line)
    oversize = await receive_json(transport)
    await transport.send(b'{"seq_id": 6, "action": "nope", "data": {}}')
    unknown = await receive_json(transport)
    await transport.send(b'{"seq_id": 7, "action": "echo", "data": {"after": "all that"}}')
    good = await receive_json(transport)

    assert (not_json["seq_id"], not_json["code"], not_json["data"]["error"]["code"]) == (
        None,
        1,
        "invalid_argument",
    )
    assert (not_object["seq_id"], not_object["data"]["error"]["code"]) == (None, "invalid_argument")
    assert (missing_action["seq_id"], missing_action["data"]["error"]["code"]) == (5, "invalid_argument")
    assert (oversize["seq_id"], oversize["data"]["error"]["code"]) == (77, "payload_too_large")
    assert (unknown["seq_id"], unknown["data"]["error"]["code"]) == (6, "not_found")
    assert good == {
        "seq_id": 7,
        "code": 0,
        "message": "",
        "data": {"echo": {"after": "all that"}},
        "chunk_status": "end",
    }


async def test_an_oversize_line_from_the_child_is_discarded_and_reading_goes_on(child_argv, tmp_path):
    # given a child that first writes a line far over the cap, then a valid frame
    script = tmp_path / "noisy_child.py"
    script.write_text(
        "import sys\n"
        "out = sys.stdout.buffer\n"
        'out.write(b\'{"seq_id":1,"code":0,"data":"\' + b\'y\' * (3 * 1024 * 1024) + b\'"}\\n\')\n'
        'out.write(b\'{"seq_id":2,"action":"hello","data":{}}\\n\')\n'
        "out.flush()\n"
        "sys.stdin.read()\n"
    )
    transport, process = await spawn_stdio_transport([sys.executable, str(script)], max_frame_bytes=64 * 1024)

    # when the host reads from it
    with pytest.raises(FrameTooLarge) as caught:
        await asyncio.wait_for(transport.receive(), 10)
    following = await receive_json(transport)

    # then the giant line surfaces as FrameTooLarge with its head kept, and the next line is intact
    assert caught.value.head.startswith(b'{"seq_id":1,"code":0')
    assert len(caught.value.head) <= 64 * 1024
    assert caught.value.size >= 3 * 1024 * 1024
    assert following == {"seq_id": 2, "action": "hello", "data": {}}
    await transport.close()
    await asyncio.wait_for(process.wait(), 5)


async def test_a_child_that_exits_fails_pending_calls(child):
    transport, _ = child
    host = Connection(transport, name="host")
    await host.start()
    held = asyncio.ensure_future(host.call("hold", {}))
    await host.call("echo", {})  # the hold request is in the child by now

    with pytest.raises(WireError):
        await host.call("die", {})
    with pytest.raises(WireError) as caught:
        await asyncio.wait_for(held, 5)

    assert caught.value.error.code == ErrorCode.RUNTIME_ERROR
    assert caught.value.error.message == "connection closed"
    await asyncio.wait_for(host.wait_closed(), 5)
    assert host.closed
