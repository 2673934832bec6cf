"""POST /api/v1/events routes by the bindings' trigger filters: a binding whose filter refuses the event is
not a candidate (another may answer), an event no filter accepts is `no_binding`, a matched group prefix
is removed from what the run and the transcript see."""

from __future__ import annotations

from typing import Any

import pytest

from runners.models import Run
from tests.gateway.support import binding_for, post_event
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db


def group_message(text: str, *, mentioned: bool, chat_id: str = "g-1", user_id: str = "u-1", **fields: Any):
    return {
        "conversation_id": f"conv-{chat_id}",
        "actor": {"actor_id": user_id},
        "input": {"text": text},
        "data": {"chat_id": chat_id, "chat_type": "supergroup", "mentioned": mentioned},
        **fields,
    }


def routed_to(response) -> list[str]:
    assert response.status_code == 202, response.content
    return [run["binding_id"] for run in response.json()["runs"]]


def test_a_group_message_goes_to_the_binding_whose_prefix_it_starts_with(api_client, workspace):
    binding_for(
        workspace,
        binding_id="ai-prefixed",
        priority=10,
        trigger_policy={"group_mention": False, "group_prefixes": ["ai"]},
    )
    binding_for(workspace, binding_id="default")

    assert routed_to(post_event(api_client, group_message("ai summarize", mentioned=False))) == ["ai-prefixed"]
    assert routed_to(post_event(api_client, group_message("summarize", mentioned=True))) == ["default"]


def test_an_event_no_binding_accepts_is_recorded_without_a_run(api_client, workspace):
    binding_for(workspace, binding_id="private-only", trigger_policy={"chat_types": ["private"]})

    response = post_event(api_client, group_message("hello", mentioned=True, event_id="evt-g"))

    assert routed_to(response) == []
    assert response.json()["status"] == "no_binding"
    assert EventLog.objects.get(event_id="evt-g").status == EventLog.Status.NO_BINDING
    assert not Run.objects.exists()


def test_the_matched_prefix_is_removed_from_what_the_run_and_the_transcript_see(api_client, workspace):
    binding_for(workspace, binding_id="ai", trigger_policy={"group_mention": False, "group_prefixes": ["/ai"]})

    response = post_event(api_client, group_message("/ai   what is new?", mentioned=False, event_id="evt-p"))

    assert routed_to(response) == ["ai"]
    event = EventLog.objects.get(event_id="evt-p")
    assert event.input["text"] == "what is new?"
    assert TranscriptItem.objects.get(role="user").content == "what is new?"


def test_an_observer_does_not_change_the_text_the_replying_binding_matched(api_client, workspace):
    binding_for(workspace, binding_id="plain")
    binding_for(
        workspace,
        binding_id="watcher",
        delivery_policy={"enable_reply": False},
        trigger_policy={"group_mention": False, "group_prefixes": ["hey"]},
    )

    response = post_event(api_client, group_message("hey there", mentioned=True, event_id="evt-o"))

    assert sorted(routed_to(response)) == ["plain", "watcher"]
    assert EventLog.objects.get(event_id="evt-o").input["text"] == "hey there"


def test_a_denied_sender_is_not_answered_and_others_are(api_client, workspace):
    binding_for(workspace, binding_id="support", trigger_policy={"access_user_ids": ["u-troll"]})

    assert routed_to(post_event(api_client, group_message("hi", mentioned=True, user_id="u-troll"))) == []
    assert routed_to(post_event(api_client, group_message("hi", mentioned=True, user_id="u-2"))) == ["support"]


def test_an_ignore_prefix_keeps_commands_for_another_binding(api_client, workspace):
    binding_for(workspace, binding_id="chat", priority=5, trigger_policy={"ignore_prefixes": ["!"]})
    binding_for(workspace, binding_id="commands", trigger_policy={"group_mention": True})

    direct = {"input": {"text": "!status"}, "actor": {"actor_id": "u-1"}}
    assert routed_to(post_event(api_client, direct)) == ["commands"]
    assert routed_to(post_event(api_client, {**direct, "input": {"text": "status?"}})) == ["chat"]


def test_existing_bindings_without_a_filter_answer_as_before(api_client, workspace):
    binding_for(workspace, binding_id="old")  # stored trigger_policy {}, as every binding before filters

    group = {"input": {"text": "hello"}, "data": {"chat_id": "g-1", "chat_type": "group"}}
    assert routed_to(post_event(api_client, group)) == ["old"]
    assert routed_to(post_event(api_client, {"input": {"text": "hello"}})) == ["old"]
