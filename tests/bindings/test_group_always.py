"""`group_always`: a binding that answers every group message, addressed to the bot or not, while private
chats stay answered and the access lists and ignore rules still refuse; and, at the events API, an
unaddressed group message reaching the binding that answers everything rather than the one that waits
for a mention."""

from __future__ import annotations

from typing import Any

import pytest

from bindings.triggers import TriggerContext, TriggerPolicy, trigger_filter
from tests.gateway.support import binding_for, post_event


def check(policy: dict[str, Any], text: str = "hello", **context: Any):
    fields = {"chat_kind": "group", "mentioned": False, "chat_id": "g-1", "user_id": "u-1", **context}
    return trigger_filter(TriggerPolicy.model_validate(policy).model_dump(mode="json")).check(
        TriggerContext(text=text, **fields)
    )


def test_an_unaddressed_group_message_is_answered_only_with_group_always():
    assert check({}) is None
    assert check({"group_always": True}) is not None
    assert check({"group_always": True, "group_mention": False}) is not None


def test_private_chats_are_answered_either_way():
    assert check({"group_always": True}, chat_kind="private") is not None
    assert check({"group_always": False}, chat_kind="private") is not None


def test_group_always_still_strips_a_matched_prefix_and_keeps_other_messages_whole():
    policy = {"group_always": True, "group_prefixes": ["/ai"]}

    prefixed = check(policy, "/ai what now")
    plain = check(policy, "what now")

    assert prefixed is not None
    assert prefixed.strip == "/ai"
    assert plain is not None
    assert plain.strip == ""


def test_access_lists_and_ignore_rules_still_refuse_with_group_always():
    assert check({"group_always": True, "access_group_chat_ids": ["g-1"]}) is None
    assert check({"group_always": True, "access_mode": "allow", "access_group_chat_ids": ["g-2"]}) is None
    assert check({"group_always": True, "access_user_ids": ["u-1"]}) is None
    assert check({"group_always": True, "ignore_prefixes": ["#"]}, "# aside") is None
    assert check({"group_always": True, "chat_types": ["private"]}) is None


@pytest.mark.django_db
def test_an_unaddressed_group_message_goes_to_the_binding_that_answers_every_one(api_client, workspace):
    binding_for(workspace, binding_id="mentions-only", priority=10)
    binding_for(workspace, binding_id="everything", trigger_policy={"group_always": True})

    def message(*, mentioned: bool) -> dict[str, Any]:
        return {
            "actor": {"actor_id": "u-1"},
            "input": {"text": "anyone around?"},
            "data": {"chat_id": "g-1", "chat_type": "group", "mentioned": mentioned},
        }

    unaddressed = post_event(api_client, message(mentioned=False))
    addressed = post_event(api_client, message(mentioned=True))

    assert [run["binding_id"] for run in unaddressed.json()["runs"]] == ["everything"]
    assert [run["binding_id"] for run in addressed.json()["runs"]] == ["mentions-only"]
