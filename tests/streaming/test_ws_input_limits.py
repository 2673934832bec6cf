"""What the chat WebSocket does with hostile input (issue 22): a message nested ten thousand levels deep and a
binary frame each get an error frame and the socket stays open, without an ERROR in the log; a handshake
from an origin whose scheme or port differ from the host's is refused, a configured origin is accepted."""

from __future__ import annotations

import logging

import pytest
from channels.db import database_sync_to_async

from tests.streaming.conftest import ORIGIN, make_run, next_json, open_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

SERVED_AT = (b"host", b"127.0.0.1:8000")


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


async def signed_in(member, *headers: tuple[bytes, bytes]):
    user, workspace = member
    cookie = await database_sync_to_async(session_cookie)(user)
    comm, connected, _ = await open_socket(*(headers or (ORIGIN,)), cookie)
    assert connected
    return comm, workspace


async def still_answers(comm, workspace) -> None:
    await database_sync_to_async(make_run)(workspace, conversation_id="c-1")
    await comm.send_json_to({"type": "subscribe", "conversation_id": "c-1"})
    assert (await next_json(comm))["type"] == "subscribed"


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        ('{"type": "message", "text": "hi", "attachments": ' + deep(10_000) + "}", "attachments"),
        ('{"type": "subscribe", "conversation_id": ' + deep(10_000) + "}", "conversation_id"),
        (deep(10_000), "(message)"),
    ],
)
async def test_a_message_nested_ten_thousand_levels_gets_an_error_and_the_socket_stays_open(
    member, caplog, frame, field
):
    comm, workspace = await signed_in(member)

    with caplog.at_level(logging.WARNING):
        await comm.send_to(text_data=frame)
        error = await next_json(comm)

    assert error == {
        "type": "error",
        "code": "invalid_argument",
        "message": "The message has invalid fields.",
        "details": {"fields": {field: "Nested more than 64 levels deep."}},
    }
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await still_answers(comm, workspace)
    await comm.disconnect()


async def test_a_binary_frame_gets_an_error_and_the_socket_stays_open(member, caplog):
    comm, workspace = await signed_in(member)

    with caplog.at_level(logging.WARNING):
        await comm.send_to(bytes_data=b'{"type": "subscribe", "conversation_id": "c-1"}')
        error = await next_json(comm)

    assert error["type"] == "error"
    assert error["code"] == "invalid_argument"
    assert "Binary frames" in error["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await still_answers(comm, workspace)
    await comm.disconnect()


@pytest.mark.parametrize("origin", [b"http://127.0.0.1:9999", b"https://localhost", b"https://127.0.0.1:8000"])
async def test_an_origin_with_another_scheme_or_port_is_refused(member, origin):
    user, _ = member
    cookie = await database_sync_to_async(session_cookie)(user)

    _comm, connected, _ = await open_socket((b"origin", origin), SERVED_AT, cookie)

    assert not connected


@pytest.mark.parametrize("origin", [b"http://127.0.0.1:8000", b"HTTP://127.0.0.1:8000"])
async def test_the_origin_the_socket_is_served_at_is_accepted(member, origin):
    comm, workspace = await signed_in(member, (b"origin", origin), SERVED_AT)

    await still_answers(comm, workspace)
    await comm.disconnect()


async def test_an_origin_listed_in_the_setting_is_accepted(member, settings):
    # Behind a proxy that terminates TLS: the socket is served over ws, the page is https on port 443.
    settings.LANGBOT_WS_ALLOWED_ORIGINS = ["https://localhost"]

    comm, workspace = await signed_in(member, (b"origin", b"https://localhost"), SERVED_AT)

    await still_answers(comm, workspace)
    await comm.disconnect()


async def test_a_default_port_written_out_is_the_same_origin(member):
    comm, workspace = await signed_in(member, (b"origin", b"http://localhost:80"), (b"host", b"localhost"))

    await still_answers(comm, workspace)
    await comm.disconnect()
