"""Who may open `/ws/v1/chat/`: session members, bearers of a fresh one-time ticket, from an allowed origin."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from bindings.models import WorkspaceMembership
from bindings.services import api_key_create
from tests.factories import UserFactory
from tests.streaming.conftest import ORIGIN, make_run, next_json, open_socket, session_cookie
from transcripts.models import EventLog
from webchat import tickets

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_signed_in_member_can_subscribe_to_a_conversation_of_their_workspace(member):
    user, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="c-1")
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected

    await comm.send_json_to({"type": "subscribe", "conversation_id": "c-1"})

    assert await next_json(comm) == {"type": "subscribed", "conversation_id": "c-1", "last_id": 0}
    await comm.disconnect()


async def test_without_a_session_or_ticket_the_socket_is_closed_with_4401(member):
    comm, connected, _ = await open_socket(ORIGIN)

    assert connected  # accepted so that the close code reaches the client
    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_a_session_user_without_a_workspace_is_closed_with_4403(transactional_db):
    loner = await database_sync_to_async(UserFactory.create)()
    comm, _, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(loner))

    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


@pytest.mark.parametrize("slug", ["someone-elses", "a%00b"])
async def test_a_workspace_the_member_does_not_have_is_closed_with_4403(member, slug):
    user, _ = member
    cookie = await database_sync_to_async(session_cookie)(user)
    comm, _, _ = await open_socket(ORIGIN, cookie, query=f"workspace={slug}")

    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


async def test_a_handshake_from_a_foreign_origin_is_refused(member):
    user, _ = member
    cookie = await database_sync_to_async(session_cookie)(user)

    _comm, connected, _ = await open_socket((b"origin", b"https://evil.example"), cookie)

    assert not connected


def _issue_ticket_over_http(workspace) -> str:
    from rest_framework.test import APIClient

    _, key = api_key_create(workspace=workspace)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.post("/api/v1/ws-tickets")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["url"].endswith(body["ticket"])
    assert body["expires_in"] <= 60
    return body["ticket"]


async def test_an_api_key_ticket_opens_exactly_one_connection(member):
    _, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="c-t")
    ticket = await database_sync_to_async(_issue_ticket_over_http)(workspace)

    first, _connected, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")
    await first.send_json_to({"type": "subscribe", "conversation_id": "c-t"})
    assert (await next_json(first))["type"] == "subscribed"

    second, _, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")
    assert await second.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    await first.disconnect()


async def test_an_expired_ticket_is_refused(member, monkeypatch):
    _, workspace = member
    ticket = await database_sync_to_async(_issue_ticket_over_http)(workspace)
    later = tickets._now() + tickets.TICKET_TTL_SECONDS + 1
    monkeypatch.setattr(tickets, "_now", lambda: later)

    comm, _, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")

    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_an_unknown_ticket_is_refused_even_with_a_valid_session(member):
    user, _ = member
    cookie = await database_sync_to_async(session_cookie)(user)

    comm, _, _ = await open_socket(ORIGIN, cookie, query="ticket=made-up")

    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


def test_tickets_need_credentials(client):
    response = client.post("/api/v1/ws-tickets")

    assert response.status_code in (401, 403)


async def test_a_viewer_reads_but_sends_and_cancels_nothing(member):
    # README, "Workspace roles": a viewer reads runs and conversations; sending and cancelling need an operator
    user, workspace = member
    await database_sync_to_async(WorkspaceMembership.objects.filter(user=user).update)(
        role=WorkspaceMembership.Role.VIEWER
    )
    run = await database_sync_to_async(make_run)(workspace, conversation_id="c-1")
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected

    await comm.send_json_to({"type": "subscribe", "conversation_id": "c-1"})
    assert (await next_json(comm))["type"] == "subscribed"
    await comm.send_json_to({"type": "message", "conversation_id": "c-1", "text": "hello"})
    sent = await next_json(comm)
    await comm.send_json_to({"type": "cancel", "run_id": str(run.run_id)})
    cancelled = await next_json(comm)

    assert (sent["type"], sent["code"]) == ("error", "forbidden")
    assert (cancelled["type"], cancelled["code"]) == ("error", "forbidden")
    assert (
        await database_sync_to_async(EventLog.objects.filter(workspace=workspace, input__text="hello").exists)()
        is False
    )
    await database_sync_to_async(run.refresh_from_db)()
    assert run.cancel_requested_at is None
    await comm.disconnect()
