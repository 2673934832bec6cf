"""What a chat WebSocket delivers: a conversation's run events replayed from a cursor and then live, with
nothing lost or repeated at the seam; messages through the gateway; cancel; and a client that stops reading."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from bindings.models import WorkspaceMembership
from runners.models import Run
from tests.factories import AgentBindingFactory, UserFactory, WorkspaceFactory
from tests.streaming.conftest import (
    ORIGIN,
    SlowReaderCommunicator,
    collect,
    emit,
    finish,
    ids,
    make_run,
    next_json,
    open_socket,
    persist,
    publish,
    session_cookie,
)
from transcripts.models import EventLog
from webchat.consumers import ChatConsumer

pytestmark = pytest.mark.django_db(transaction=True)


async def signed_in(user, **kwargs):
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user), **kwargs)
    assert connected
    return comm


async def test_resume_replays_after_the_cursor_then_goes_live_without_gap_or_duplicate(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    seen = await emit(run, "message.delta", "message.delta")  # the client had these before it dropped
    # Persisted while the client was away; their publication is still in flight and lands after the replay.
    late = await database_sync_to_async(persist)(run, "message.delta", "message.delta")
    comm = await signed_in(user)

    await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1", "after_id": seen[-1].id})
    replayed = await collect(comm, 3)
    await publish(run, late)
    await emit(run, "message.delta", "message.completed", "run.completed")
    live = await collect(comm, 3)

    run_id = str(run.run_id)
    assert ids(replayed) == [(run_id, 3), (run_id, 4)]
    assert replayed[-1] == {"type": "subscribed", "conversation_id": "conv-1", "last_id": late[-1].id}
    assert ids(live) == [(run_id, 5), (run_id, 6), (run_id, 7)]
    assert live[0]["event"] == {"type": "message.delta", "data": {"chunk": {"role": "assistant", "content": "part5 "}}}
    await comm.disconnect()


async def test_an_event_the_channel_layer_lost_is_filled_from_the_database(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    await database_sync_to_async(persist)(run, "message.delta")
    comm = await signed_in(user)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1", "after_id": 0})
    await collect(comm, 2)

    await database_sync_to_async(persist)(run, "message.delta")  # persisted, never published
    await emit(run, "message.completed")

    run_id = str(run.run_id)
    assert ids(await collect(comm, 2)) == [(run_id, 2), (run_id, 3)]
    await comm.disconnect()


async def test_without_a_cursor_only_runs_in_progress_are_replayed(member):
    user, workspace = member
    done = await database_sync_to_async(make_run)(workspace, status=Run.Status.COMPLETED)
    await emit(done, "message.completed", "run.completed")
    active = await database_sync_to_async(make_run)(workspace)
    await emit(active, "message.delta")
    comm = await signed_in(user)

    await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1"})
    replayed = await collect(comm, 2)
    await emit(active, "message.delta")

    assert ids(replayed) == [(str(active.run_id), 1)]
    assert ids([await next_json(comm)]) == [(str(active.run_id), 2)]
    await comm.disconnect()


async def test_another_workspaces_conversation_answers_exactly_like_an_unknown_one(member):
    user, _ = member
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(make_run)(stranger, conversation_id="theirs")
    comm = await signed_in(user)

    await comm.send_json_to({"type": "subscribe", "conversation_id": "theirs"})
    theirs = await next_json(comm)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "nobodys"})
    nobodys = await next_json(comm)

    assert theirs["type"] == nobodys["type"] == "error"
    assert theirs["code"] == nobodys["code"] == "not_found"
    assert theirs["message"].replace("theirs", "X") == nobodys["message"].replace("nobodys", "X")
    await comm.disconnect()


async def test_a_workspace_member_never_receives_another_workspaces_events(member):
    user, workspace = member
    mine = await database_sync_to_async(make_run)(workspace, conversation_id="shared-name")
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    theirs = await database_sync_to_async(make_run)(stranger, conversation_id="shared-name")
    comm = await signed_in(user)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "shared-name", "after_id": 0})
    await next_json(comm)

    await emit(theirs, "message.delta")
    await emit(mine, "message.delta")

    assert ids([await next_json(comm)]) == [(str(mine.run_id), 1)]
    await comm.disconnect()


async def test_a_message_starts_a_run_through_the_gateway_and_streams_it(member):
    user, workspace = member
    binding = await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace, binding_id="helper")
    comm = await signed_in(user)

    await comm.send_json_to({"type": "message", "text": "qa:stream hello"})
    subscribed = await next_json(comm)
    status = await next_json(comm)
    run = await database_sync_to_async(Run.objects.get)(run_id=status["run_id"])
    await emit(run, "message.delta", "run.completed")

    assert subscribed["type"] == "subscribed"
    assert status["type"] == "run.status"
    assert status["status"] == "queued"
    assert status["conversation_id"] == subscribed["conversation_id"] == run.conversation_id
    assert status["binding_id"] == binding.binding_id
    event = await database_sync_to_async(EventLog.objects.get)(event_id=status["event_id"])
    assert (event.source, event.input["text"]) == ("webui", "qa:stream hello")
    assert event.actor["actor_id"] == f"user:{user.pk}"
    assert ids(await collect(comm, 2)) == [(status["run_id"], 1), (status["run_id"], 2)]
    await comm.disconnect()


async def test_a_binding_that_would_not_receive_the_message_is_refused_and_nothing_is_ingested(member):
    user, workspace = member
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace, binding_id="main", priority=5)
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace, binding_id="spare", priority=1)
    comm = await signed_in(user)

    await comm.send_json_to({"type": "message", "conversation_id": "c-b", "binding_id": "spare", "text": "hi"})
    await next_json(comm)  # subscribed
    error = await next_json(comm)

    assert (error["type"], error["code"]) == ("error", "binding.not_routed")
    assert not await database_sync_to_async(EventLog.objects.filter(conversation_id="c-b").exists)()
    await comm.disconnect()


async def test_a_malformed_request_gets_an_error_and_the_socket_stays_open(member):
    user, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="c-1")
    comm = await signed_in(user)

    await comm.send_json_to({"type": "subscribe"})
    missing = await next_json(comm)
    await comm.send_json_to({"type": "dance"})
    unknown = await next_json(comm)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "c-1"})

    assert (missing["code"], unknown["code"]) == ("invalid_argument", "invalid_argument")
    assert "conversation_id" in missing["details"]["fields"]
    assert (await next_json(comm))["type"] == "subscribed"
    await comm.disconnect()


async def test_a_message_with_a_nul_character_is_refused_and_the_socket_stays_open(member):
    user, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="c-1")
    events = await database_sync_to_async(EventLog.objects.count)()
    comm = await signed_in(user)

    await comm.send_json_to({"type": "message", "conversation_id": "c-1", "text": "a\x00b"})
    refused = await next_json(comm)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "c-1"})

    assert (refused["code"], refused["details"]["fields"]) == (
        "invalid_argument",
        {"text": "Must not contain NUL characters or unpaired surrogates."},
    )
    assert (await next_json(comm))["type"] == "subscribed"
    assert await database_sync_to_async(EventLog.objects.count)() == events
    await comm.disconnect()


async def test_cancel_stops_a_queued_run_of_the_workspace(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace, status=Run.Status.QUEUED)
    comm = await signed_in(user)

    await comm.send_json_to({"type": "cancel", "run_id": str(run.run_id)})
    answer = await next_json(comm)

    assert answer["type"] == "run.status"
    assert answer["status"] == "cancelled"
    await database_sync_to_async(run.refresh_from_db)()
    assert run.status == Run.Status.CANCELLED
    await comm.disconnect()


async def test_cancel_of_another_workspaces_run_is_not_found(member):
    user, _ = member
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    run = await database_sync_to_async(make_run)(stranger, status=Run.Status.QUEUED)
    comm = await signed_in(user)

    await comm.send_json_to({"type": "cancel", "run_id": str(run.run_id)})

    assert (await next_json(comm))["code"] == "not_found"
    await database_sync_to_async(run.refresh_from_db)()
    assert run.status == Run.Status.QUEUED
    await comm.disconnect()


async def test_a_run_ending_without_its_terminal_result_still_delivers_what_was_persisted(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    comm = await signed_in(user)
    await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1", "after_id": 0})
    await next_json(comm)
    await emit(run, "message.delta")
    await next_json(comm)

    await database_sync_to_async(persist)(run, "message.delta", "run.failed")  # publication lost
    await finish(run, Run.Status.FAILED)

    messages = await collect(comm, 3)
    assert ids(messages) == [(str(run.run_id), 2), (str(run.run_id), 3)]
    assert messages[-1]["type"] == "run.status"
    assert messages[-1]["status"] == "failed"
    await comm.disconnect()


async def test_a_client_that_stops_reading_is_closed_with_4408_and_others_keep_receiving(member, monkeypatch):
    monkeypatch.setattr(ChatConsumer, "send_queue_max", 5)
    user, workspace = member
    other_user = await database_sync_to_async(UserFactory.create)()
    await database_sync_to_async(WorkspaceMembership.objects.create)(
        workspace=workspace, user=other_user, role=WorkspaceMembership.Role.ADMIN
    )
    run = await database_sync_to_async(make_run)(workspace)
    slow = await signed_in(user, communicator=SlowReaderCommunicator)
    steady = await signed_in(other_user)
    for comm in (slow, steady):
        await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1", "after_id": 0})
        await next_json(comm)

    slow.stop_reading()
    await emit(run, *["message.delta"] * 30)

    assert len(ids(await collect(steady, 30))) == 30
    slow.resume_reading()
    outputs = []
    while True:
        output = await slow.receive_output(timeout=5)
        outputs.append(output)
        if output["type"] == "websocket.close":
            break
    assert outputs[-1] == {"type": "websocket.close", "code": 4408}
    assert len(outputs) - 1 < 30
    await steady.disconnect()


async def test_the_server_pings_an_idle_connection(member, monkeypatch):
    monkeypatch.setattr(ChatConsumer, "ping_seconds", 0.05)
    user, _ = member
    comm = await signed_in(user)

    message = await asyncio.wait_for(comm.receive_json_from(timeout=5), 5)

    assert message == {"type": "ping"}
    await comm.disconnect()
