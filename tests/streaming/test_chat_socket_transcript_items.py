"""What a chat WebSocket shows of a runner's platform actions on the web surface: a `message.send`, a
`message.edit` or a `reaction.add` reaches the conversation's subscribers as a `transcript.item`, and
only theirs. The actions go through the real delivery layer, which publishes after its transaction commits.
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import transaction

from runners.actions.delivery import platform_action_deliver
from runners.models import Run
from tests.factories import WorkspaceFactory
from tests.streaming.conftest import ORIGIN, make_run, next_json, open_socket, session_cookie
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


async def subscribed_to(user, conversation_id: str):
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected
    await comm.send_json_to({"type": "subscribe", "conversation_id": conversation_id, "after_id": 0})
    assert (await next_json(comm))["type"] == "subscribed"
    return comm


def deliver(run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """What the host API handler does when a runner's platform action is allowed: deliver in a transaction."""
    with transaction.atomic():
        return platform_action_deliver(run=run, action=action, target=target, payload=payload)


async def test_a_message_a_runner_sends_reaches_the_conversations_subscribers(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    comm = await subscribed_to(user, "conv-1")

    result = await database_sync_to_async(deliver)(run, "message.send", {}, {"text": "an extra hello"})
    message = await next_json(comm)

    stored = await database_sync_to_async(TranscriptItem.objects.get)(pk=int(result["message_id"]))
    assert message["type"] == "transcript.item"
    assert message["action"] == "message.send"
    assert message["run_id"] == str(run.run_id)
    assert message["item"]["message_id"] == str(stored.pk)
    assert (message["item"]["role"], message["item"]["content"]) == ("assistant", "an extra hello")
    assert message["item"]["created_at"] == stored.created_at.isoformat()
    await comm.disconnect()


async def test_an_edit_and_a_reaction_name_the_message_they_change(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    sent = await database_sync_to_async(deliver)(run, "message.send", {}, {"text": "draft"})
    comm = await subscribed_to(user, "conv-1")

    target = {"message_id": sent["message_id"]}
    await database_sync_to_async(deliver)(run, "message.edit", target, {"text": "final"})
    await database_sync_to_async(deliver)(run, "reaction.add", target, {"reaction": "👍"})
    edited, reacted = await next_json(comm), await next_json(comm)

    assert (edited["action"], edited["item"]["message_id"], edited["item"]["content"]) == (
        "message.edit", sent["message_id"], "final",
    )  # fmt: skip
    assert (reacted["action"], reacted["item"], reacted["reaction"]) == (
        "reaction.add", {"message_id": sent["message_id"]}, "👍",
    )  # fmt: skip
    await comm.disconnect()


async def test_transcript_items_of_other_conversations_and_workspaces_are_not_forwarded(member):
    user, workspace = member
    elsewhere = await database_sync_to_async(make_run)(workspace, conversation_id="conv-other")
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    theirs = await database_sync_to_async(make_run)(stranger, conversation_id="conv-1")
    mine = await database_sync_to_async(make_run)(workspace, conversation_id="conv-1")
    comm = await subscribed_to(user, "conv-1")

    # Published in this order into one channel: a leak would arrive before the subscriber's own message.
    await database_sync_to_async(deliver)(elsewhere, "message.send", {}, {"text": "other conversation"})
    await database_sync_to_async(deliver)(theirs, "message.send", {}, {"text": "other workspace"})
    await database_sync_to_async(deliver)(mine, "message.send", {}, {"text": "mine"})

    message = await next_json(comm)
    assert (message["run_id"], message["item"]["content"]) == (str(mine.run_id), "mine")
    await comm.disconnect()


async def test_an_action_whose_transaction_rolls_back_is_never_shown(member):
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    comm = await subscribed_to(user, "conv-1")

    def deliver_then_roll_back() -> None:
        with transaction.atomic():
            platform_action_deliver(run=run, action="message.send", target={}, payload={"text": "rolled back"})
            transaction.set_rollback(True)  # the handler failed after delivering

    await database_sync_to_async(deliver_then_roll_back)()
    await database_sync_to_async(deliver)(run, "message.send", {}, {"text": "kept"})

    assert (await next_json(comm))["item"]["content"] == "kept"
    await comm.disconnect()
