"""A binding's rate limits on `POST /api/v1/events` and the debug chat: an event over a limit is refused
(429 `rate_limited` and `Retry-After` for the API, a `rate_limited` refusal for the chat), nothing of it is
stored, and once the window is over the same `event_id` is taken; a second sender is not held back by the
first one's limit; a redelivered event is still answered as the duplicate it is."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from gateway.rate_limits import KEY_PREFIX
from runners.lifecycle import services as run_services
from runners.models import Run
from tests.bindings.test_bindings_api import body as binding_body
from tests.bindings.test_bindings_api import fields_of
from tests.gateway.support import binding_for, post_event
from tests.streaming.conftest import chat_caller
from transcripts.models import EventLog
from webchat.chat import ChatRefusedError, chat_message_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def counters() -> redis.Redis:
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{KEY_PREFIX}:*"):
        client.delete(key)
    return client


def from_user(user_id: str, event_id: str, *, chat_id: str = "room-1") -> dict:
    return {
        "event_id": event_id,
        "actor": {"actor_id": user_id},
        "input": {"text": "hello"},
        "data": {"chat_id": chat_id},
    }


def test_an_event_over_the_senders_limit_answers_429_with_retry_after_and_stores_nothing(
    api_client, workspace, counters
):
    binding_for(workspace, trigger_policy={"rate_limit_per_user": {"messages": 2, "seconds": 120}})

    accepted = [post_event(api_client, from_user("ada", f"evt-{n}")) for n in range(2)]
    refused = post_event(api_client, from_user("ada", "evt-2"))

    assert [r.status_code for r in accepted] == [202, 202]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 120
    assert not EventLog.objects.filter(event_id="evt-2").exists()
    assert Run.objects.count() == 2, list(Run.objects.values_list("event__event_id", "binding_key", "status"))


def test_another_sender_is_not_held_back_and_the_window_end_lets_the_same_event_in(api_client, workspace, counters):
    binding_for(workspace, trigger_policy={"rate_limit_per_user": {"messages": 1, "seconds": 600}})
    post_event(api_client, from_user("ada", "evt-a1"))
    assert post_event(api_client, from_user("ada", "evt-a2")).status_code == 429

    other = post_event(api_client, from_user("bob", "evt-b1"))
    for key in counters.scan_iter(f"{KEY_PREFIX}:*"):  # the window is over
        counters.delete(key)
    again = post_event(api_client, from_user("ada", "evt-a2"))

    assert other.status_code == 202
    assert again.status_code == 202
    assert len(again.json()["runs"]) == 1


def test_a_redelivered_event_is_answered_as_a_duplicate_even_over_the_limit(api_client, workspace, counters):
    binding_for(workspace, trigger_policy={"rate_limit_per_chat": {"messages": 1, "seconds": 600}})

    first = post_event(api_client, from_user("ada", "evt-once"))
    again = post_event(api_client, from_user("ada", "evt-once"))

    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["runs"] == first.json()["runs"]


def test_a_binding_without_limits_is_not_counted(api_client, workspace, counters):
    binding_for(workspace)

    answers = [post_event(api_client, from_user("ada", f"evt-{n}")) for n in range(3)]

    assert [a.status_code for a in answers] == [202, 202, 202]
    assert not list(counters.scan_iter(f"{KEY_PREFIX}:*"))


def test_limits_out_of_bounds_are_refused_when_the_binding_is_saved(api_client, runner):
    refused = api_client.post(
        "/api/v1/bindings",
        binding_body(runner, trigger_policy={"rate_limit_per_user": {"messages": 0, "seconds": 60}}),
        format="json",
    )
    saved = api_client.post(
        "/api/v1/bindings",
        binding_body(
            runner,
            trigger_policy={"rate_limit_per_user": {"messages": 5, "seconds": 60}, "group_always": True},
            delivery_policy={"group_reply": "mention"},
        ),
        format="json",
    )

    assert any(field.startswith("trigger_policy.rate_limit_per_user") for field in fields_of(refused))
    assert saved.status_code == 201, saved.content
    assert saved.json()["trigger_policy"]["rate_limit_per_user"] == {"messages": 5, "seconds": 60}
    assert saved.json()["trigger_policy"]["group_always"] is True
    assert saved.json()["delivery_policy"]["group_reply"] == "mention"


def test_a_debug_chat_message_over_the_limit_is_refused_with_rate_limited(workspace, counters, monkeypatch):
    monkeypatch.setattr(run_services, "run_dispatch", lambda **_: None)  # no worker runs here
    binding_for(workspace, trigger_policy={"rate_limit_per_user": {"messages": 1, "seconds": 600}})
    caller = chat_caller(workspace)

    first = chat_message_submit(caller=caller, conversation_id="chat-1", text="hello", attachments=[])
    with pytest.raises(ChatRefusedError) as refused:
        chat_message_submit(caller=caller, conversation_id="chat-1", text="again", attachments=[])

    assert len(first.statuses) == 1
    assert refused.value.code == "rate_limited"
    assert EventLog.objects.count() == 1
