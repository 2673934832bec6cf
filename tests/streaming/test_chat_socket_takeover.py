"""What the debug chat's socket shows of a human takeover (README "Human takeover"): the hold as it starts and
ends (`conversation.hold`), and the operator's reply as the bot's side of the conversation (`transcript.item`),
to that conversation's subscribers only."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from runners.actions.operator import operator_reply
from runners.takeover.services import conversation_release, conversation_takeover
from tests.factories import WorkspaceFactory
from tests.streaming.conftest import make_run, next_json
from tests.streaming.test_chat_socket_transcript_items import subscribed_to

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_hold_and_the_operators_reply_reach_the_conversations_subscribers(member):
    user, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="conv-1")
    comm = await subscribed_to(user, "conv-1")

    await database_sync_to_async(conversation_takeover)(
        workspace_id=workspace.pk, conversation_id="conv-1", operator="ops@example.com", reason="a person asked"
    )
    held = await next_json(comm)
    await database_sync_to_async(operator_reply)(
        workspace_id=workspace.pk, conversation_id="conv-1", operator="ops@example.com", text="Hi, a person here."
    )
    reply = await next_json(comm)
    await database_sync_to_async(conversation_release)(
        workspace_id=workspace.pk, conversation_id="conv-1", operator="ops@example.com"
    )
    released = await next_json(comm)

    assert held["type"] == "conversation.hold"
    assert (held["hold"]["status"], held["hold"]["held_by"]) == ("held", "ops@example.com")
    assert reply["type"] == "transcript.item"
    assert (reply["item"]["role"], reply["item"]["content"]) == ("assistant", "Hi, a person here.")
    assert released["type"] == "conversation.hold"
    assert released["hold"]["status"] == "released"
    await comm.disconnect()


async def test_another_workspaces_takeover_of_a_conversation_of_the_same_id_is_not_shown(member):
    user, workspace = member
    await database_sync_to_async(make_run)(workspace, conversation_id="conv-1")
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(make_run)(stranger, conversation_id="conv-1")
    comm = await subscribed_to(user, "conv-1")

    await database_sync_to_async(conversation_takeover)(
        workspace_id=stranger.pk, conversation_id="conv-1", operator="them@example.com"
    )
    await database_sync_to_async(operator_reply)(
        workspace_id=stranger.pk, conversation_id="conv-1", operator="them@example.com", text="not for you"
    )

    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()
