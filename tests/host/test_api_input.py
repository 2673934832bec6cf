"""Input every REST operation refuses the same way, found by `test_api_fuzz`: text the database cannot
store, bodies that are not JSON, JSON of the wrong type, filter values that are not values, URLs that
match no route. Each answers a 4xx in the API's error shape, stores nothing and never becomes a 500."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from artifacts.models import Artifact
from bindings.models import AgentBinding, Bot
from tests.factories import AgentBindingFactory
from tests.gateway.support import field_errors_of, message
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (message("nul \x00 in the text"), "input.text"),
        (message(data={"raw": {"nested": ["ok", "nul\x00"]}}), "data.raw.nested.1"),
        # `\ud800` in JSON decodes to a lone surrogate, which has no UTF-8 form.
        (message(data={"key\ud800": 1}), "data"),
    ],
)
def test_an_event_with_text_the_database_cannot_store_is_refused_by_field(api_client, body, field):
    raw = json.dumps(body)  # escapes both as \u0000 and \ud800, as a client's JSON would
    response = api_client.post("/api/v1/events", raw, content_type="application/json")

    assert field_errors_of(response) == {field: "Must not contain NUL characters or unpaired surrogates."}
    assert EventLog.objects.count() == 0


def test_a_binding_with_a_nul_in_its_config_is_refused(api_client):
    body = {
        "event_types": ["message.received"],
        "runner_id": "plugin:langbot/qa-runner/default",
        "runner_config": {"prompt": "a\x00b"},
    }

    response = api_client.post("/api/v1/bindings", body, format="json")

    assert "runner_config.prompt" in field_errors_of(response)
    assert not AgentBinding.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs?conversation_id=a%00b",
        "/api/v1/bindings/a%00b",
        "/api/v1/conversations/a%00b/transcript",
    ],
)
def test_a_nul_in_the_path_or_query_is_refused(api_client, url):
    response = api_client.get(url)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"


@pytest.mark.parametrize("url", ["/chat/?workspace=a%00b", "/admin/runners/run/?conversation_id=a%00b"])
def test_a_nul_in_the_query_of_a_page_outside_the_api_is_a_plain_400(admin_client, url):
    # Both reached a query and failed with a 500 before the middleware covered every request.
    response = admin_client.get(url)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert "NUL" in response.content.decode()


@pytest.mark.parametrize(
    ("fields", "field"), [({"name": "x\x00y"}, "name"), ({"conversation_id": "c\x00"}, "conversation_id")]
)
def test_an_upload_with_a_field_the_database_cannot_store_is_refused(api_client, settings, tmp_path, fields, field):
    settings.ARTIFACT_STORAGE_URL = f"file://{tmp_path}"
    upload = SimpleUploadedFile("note.txt", b"hello", content_type="text/plain")

    response = api_client.post("/api/v1/artifacts", {"file": upload, **fields}, format="multipart")

    assert field_errors_of(response) == {field: "Must not contain NUL characters or unpaired surrogates."}
    assert not Artifact.objects.exists()


def test_a_form_encoded_body_is_refused_as_an_unsupported_media_type(api_client):
    response = api_client.post("/api/v1/bots", {"name": "form"}, format="multipart")

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert not Bot.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("enabled", 0), ("enabled", "false"), ("name", 5)])
def test_a_json_value_of_the_wrong_type_is_refused(api_client, field, value):
    response = api_client.post("/api/v1/bots", {field: value}, format="json")

    assert field in field_errors_of(response)
    assert not Bot.objects.exists()


def test_a_boolean_filter_that_is_not_a_boolean_is_refused(api_client, workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="off", enabled=False)

    assert field_errors_of(api_client.get("/api/v1/bindings?enabled=maybe")) == {"enabled": "Must be true or false."}
    listed = api_client.get("/api/v1/bindings?enabled=false").json()["items"]
    assert [b["binding_id"] for b in listed] == ["off"]
    assert api_client.get("/api/v1/bindings?enabled=").status_code == 200


def test_an_api_url_that_matches_no_route_answers_in_the_error_shape(api_client):
    response = api_client.get("/api/v1/runs/not-a-uuid/nothing-here")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_a_page_outside_the_api_keeps_djangos_not_found_page(client):
    response = client.get("/no-such-page")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
