"""Request limits of the REST API seen by a client (issue 22): a body above the API's cap answers 413, JSON
nested too deeply answers 400 naming the field, a body in a media type the endpoint does not take answers
415 — each in the documented error shape, storing nothing, never a 500."""

from __future__ import annotations

import json

import pytest

from bindings.models import AgentBinding, Bot
from tests.factories import AgentBindingFactory
from tests.gateway.support import field_errors_of, message
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db

RUNNER = "plugin:langbot/qa-runner/default"


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_text(depth: int) -> str:
    """JSON text nested `depth` levels, as a hostile client writes it (json.dumps would recurse itself)."""
    return "[" * depth + "]" * depth


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


def test_a_bot_with_twenty_megabytes_of_credentials_is_refused_with_413(api_client):
    body = json.dumps({"name": "big", "credentials": {"token": "x" * (20 * 1024 * 1024)}})

    response = api_client.post("/api/v1/bots", body, content_type="application/json")

    error = error_of(response, 413)
    assert error["code"] == "payload_too_large"
    assert error["details"] == {"max_bytes": 1024 * 1024}
    assert not Bot.objects.exists()


def test_the_api_body_cap_is_a_setting(api_client, settings):
    settings.LANGBOT_API_BODY_MAX_BYTES = 2000

    refused = api_client.post("/api/v1/bots", {"name": "big", "credentials": {"t": "x" * 3000}}, format="json")
    small = api_client.post("/api/v1/bots", {"name": "small", "credentials": {"t": "x" * 1000}}, format="json")

    assert error_of(refused, 413)["details"] == {"max_bytes": 2000}
    assert small.status_code == 201, small.content
    assert list(Bot.objects.values_list("name", flat=True)) == ["small"]


def test_events_keep_their_own_cap(api_client, settings):
    settings.LANGBOT_API_BODY_MAX_BYTES = 1000
    settings.LANGBOT_MAX_EVENT_BYTES = 10_000

    response = api_client.post("/api/v1/events", message("x" * 5000), format="json")

    assert response.status_code == 202, response.content


def test_a_patch_above_the_cap_is_refused_and_changes_nothing(api_client, workspace, settings):
    settings.LANGBOT_API_BODY_MAX_BYTES = 1000
    binding = AgentBindingFactory.create(workspace=workspace, name="kept")

    response = api_client.patch(f"/api/v1/bindings/{binding.binding_id}", {"name": "y" * 2000}, format="json")

    assert error_of(response, 413)["code"] == "payload_too_large"
    binding.refresh_from_db()
    assert binding.name == "kept"


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/events", {"input": {"text": "hi"}, "data": "DEEP"}, "data"),
        ("/api/v1/bindings", {"event_types": ["message.received"], "runner_id": RUNNER, "runner_config": "DEEP"},
         "runner_config"),
        ("/api/v1/bots", {"name": "b", "credentials": "DEEP"}, "credentials"),
        ("/api/v1/bots", "DEEP", "(body)"),
    ],
)  # fmt: skip
def test_json_nested_ten_thousand_levels_is_refused_naming_the_field(api_client, url, body, field):
    raw = json.dumps(body).replace('"DEEP"', deep_text(10_000))

    response = api_client.post(url, raw, content_type="application/json")

    assert field_errors_of(response) == {field: "Nested more than 64 levels deep."}
    assert not EventLog.objects.exists()
    assert not AgentBinding.objects.exists()
    assert not Bot.objects.exists()


def test_a_patch_nested_too_deeply_is_refused_naming_the_field(api_client, workspace):
    binding = AgentBindingFactory.create(workspace=workspace)
    raw = json.dumps({"runner_config": "DEEP"}).replace('"DEEP"', deep_text(10_000))

    response = api_client.patch(f"/api/v1/bindings/{binding.binding_id}", raw, content_type="application/json")

    assert field_errors_of(response) == {"runner_config": "Nested more than 64 levels deep."}


def test_json_at_the_depth_limit_is_accepted_and_one_more_level_is_not(api_client):
    # The body is one level; `data` holds the other 63 (64 in the refused one).
    accepted = api_client.post("/api/v1/events", message(data=nested(63)), format="json")
    refused = api_client.post("/api/v1/events", message(data=nested(64)), format="json")

    assert accepted.status_code == 202, accepted.content
    assert field_errors_of(refused) == {"data": "Nested more than 64 levels deep."}


def test_brackets_inside_strings_do_not_count_as_depth(api_client):
    response = api_client.post("/api/v1/events", message("[" * 500 + "{" * 500), format="json")

    assert response.status_code == 202, response.content


def test_the_depth_limit_is_a_setting(api_client, settings):
    settings.LANGBOT_API_JSON_MAX_DEPTH = 5

    response = api_client.post("/api/v1/bots", {"name": "b", "credentials": nested(5)}, format="json")

    assert field_errors_of(response) == {"credentials": "Nested more than 5 levels deep."}


def test_a_json_event_sent_as_multipart_is_refused_with_415(api_client):
    response = api_client.post("/api/v1/events", json.dumps(message()), content_type="multipart/form-data; boundary=xx")

    error = error_of(response, 415)
    assert error["code"] == "unsupported_media_type"
    assert "multipart/form-data" in error["message"]
    assert not EventLog.objects.exists()


def test_a_form_posted_to_a_json_endpoint_is_refused_with_415(api_client):
    response = api_client.post("/api/v1/bots", "name=b", content_type="application/x-www-form-urlencoded")

    assert error_of(response, 415)["code"] == "unsupported_media_type"
    assert not Bot.objects.exists()


def test_a_chunked_body_whose_length_the_server_cannot_tell_is_refused_with_411(api_client):
    # Under WSGI the body is a stream of unknown length (daphne hands over the whole body: test_limits_daphne).
    response = api_client.post(
        "/api/v1/bots", '{"name": "b"}', content_type="application/json",
        CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked",
    )  # fmt: skip

    assert error_of(response, 411)["code"] == "length_required"
    assert not Bot.objects.exists()
