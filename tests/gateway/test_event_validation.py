"""POST /api/v1/events refuses bad input with answers that name the field — never a 500, never a row."""

from __future__ import annotations

import json

import pytest

from tests.factories import BotFactory, WorkspaceFactory
from tests.gateway.support import field_errors_of, message, post_event
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db


def test_an_unknown_top_level_field_is_refused_by_name(api_client):
    response = post_event(api_client, message(workspace_id="other", colour="red"))

    fields = field_errors_of(response)
    assert set(fields) == {"workspace_id", "colour"}
    assert EventLog.objects.count() == 0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"event_id": "has space"}, "event_id"),
        ({"event_id": "x" * 201}, "event_id"),
        ({"event_type": "MessageReceived"}, "event_type"),
        ({"event_type": "message"}, "event_type"),
        ({"source": "email"}, "source"),
        ({"conversation_id": ""}, "conversation_id"),
        ({"conversation_id": "c" * 256}, "conversation_id"),
        ({"conversation_id": "line\nbreak"}, "conversation_id"),
        ({"thread_id": "   "}, "thread_id"),
        ({"actor": {"actor_type": "user", "nickname": "x"}}, "actor.nickname"),
        ({"actor": "alice"}, "actor"),
        ({"subject": {"subject_id": "m1"}}, "subject.subject_type"),
        ({"data": ["not", "an", "object"]}, "data"),
        ({"event_time": "yesterday"}, "event_time"),
        ({"event_time": True}, "event_time"),
        ({"event_time": 1e300}, "event_time"),
        ({"bot_id": ""}, "bot_id"),
    ],
)
def test_each_invalid_field_is_named(api_client, overrides, field):
    response = post_event(api_client, message(**overrides))

    assert field in field_errors_of(response)


@pytest.mark.parametrize(
    ("event_input", "field"),
    [
        ({"text": 42}, "input.text"),
        ({"text": "hi", "voice": "x"}, "input.voice"),
        ({"contents": [{"text": "no type"}]}, "input.contents.0.type"),
        ({"attachments": [{"name": "no id"}]}, "input.attachments.0"),
        ({"attachments": [{"artifact_id": "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"}]}, "input.attachments.0.artifact_id"),
    ],
)
def test_each_invalid_input_field_is_named(api_client, event_input, field):
    response = post_event(api_client, {"input": event_input})

    assert field in field_errors_of(response)


def test_a_message_without_any_input_is_refused(api_client):
    response = post_event(api_client, {"event_type": "message.received", "input": {}})

    assert "input" in field_errors_of(response)


def test_an_empty_body_is_a_message_without_input(api_client):
    response = post_event(api_client, {})

    assert "input" in field_errors_of(response)


def test_a_bot_of_another_workspace_is_refused_like_an_unknown_one(api_client):
    other_bot = BotFactory.create(workspace=WorkspaceFactory.create())

    response = post_event(api_client, message(bot_id=other_bot.bot_id))

    assert "No bot" in field_errors_of(response)["bot_id"]


def test_a_disabled_bot_is_refused(api_client, workspace):
    bot = BotFactory.create(workspace=workspace, enabled=False)

    response = post_event(api_client, message(bot_id=bot.bot_id))

    assert "disabled" in field_errors_of(response)["bot_id"]


def test_malformed_json_answers_invalid_json(api_client):
    response = api_client.post("/api/v1/events", '{"input": {"text": "hi"', content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_nan_is_not_json(api_client):
    response = api_client.post(
        "/api/v1/events", '{"input": {"text": "hi"}, "data": {"x": NaN}}', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_a_body_that_is_not_an_object_is_refused(api_client):
    response = post_event(api_client, [message()])

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"


def test_a_form_body_is_an_unsupported_media_type(api_client):
    response = api_client.post("/api/v1/events", "input=hello", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_an_oversize_body_answers_413(api_client, settings):
    settings.LANGBOT_MAX_EVENT_BYTES = 1000
    body = json.dumps(message("x" * 2000))

    response = api_client.post("/api/v1/events", body, content_type="application/json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert EventLog.objects.count() == 0


def test_an_oversize_body_with_an_understated_length_still_answers_413(api_client, settings):
    settings.LANGBOT_MAX_EVENT_BYTES = 1000
    body = json.dumps(message("x" * 2000)).encode()

    response = api_client.generic(
        "POST", "/api/v1/events", body, content_type="application/json", CONTENT_LENGTH="500"
    )

    # The stream is cut at the declared length, so the parser sees truncated JSON — a 400, not a 500.
    assert response.status_code in (400, 413)
    assert EventLog.objects.count() == 0


def test_django_upload_limit_does_not_cut_a_body_under_the_event_limit(api_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    settings.LANGBOT_MAX_EVENT_BYTES = 10_000

    response = post_event(api_client, message("x" * 500))

    assert response.status_code == 202, response.content


@pytest.mark.parametrize("wait", ["-1", "301", "soon", "nan", "inf"])
def test_an_invalid_wait_is_refused(api_client, wait):
    response = post_event(api_client, message(), wait=wait)

    assert "wait" in field_errors_of(response)
    assert EventLog.objects.count() == 0


def test_an_anonymous_caller_is_refused(client):
    response = client.post("/api/v1/events", message(), content_type="application/json")

    assert response.status_code in (401, 403)
    assert EventLog.objects.count() == 0
