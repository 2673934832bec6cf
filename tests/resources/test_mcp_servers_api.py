"""REST CRUD of MCP servers: env and header values are write-only (masked in every answer, encrypted at
rest, a mask sent back keeps them), each transport's rules are checked field by field, and everything is
scoped to the caller's workspace. Stdio servers are set up with an operator key here (who may do what:
test_mcp_stdio_policy.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from bindings.services import api_key_create
from foundation.crypto import SECRET_MASK
from resources.models import MCPServer
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db

ENV_SECRET = "env-secret-value-777"
HEADER_SECRET = "Bearer hdr-secret-888"
STDIO = {
    "name": "Files",
    "transport": "stdio",
    "command": "/usr/bin/npx",
    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
    "env": {"API_TOKEN": ENV_SECRET},
}
HTTP = {
    "name": "Remote",
    "transport": "streamable_http",
    "url": "https://mcp.example.com/mcp",
    "headers": {"Authorization": HEADER_SECRET},
}


@pytest.fixture(autouse=True)
def _allowed_commands(settings) -> None:
    settings.LANGBOT_MCP_STDIO_COMMANDS = ["/usr/bin/npx"]


@pytest.fixture
def operator_client(workspace):
    """A client with an operator key of the workspace: stdio servers are an operator's to set up."""
    _, key = api_key_create(workspace=workspace, is_operator=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def fields_of(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert body["code"] == "invalid_argument"
    return body["details"]["fields"]


def test_create_a_stdio_server_and_see_its_env_only_masked(operator_client):
    response = operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["server_id"] == "files"
    assert (body["transport"], body["command"], body["args"]) == ("stdio", "/usr/bin/npx", STDIO["args"])
    assert body["env"] == {"API_TOKEN": SECRET_MASK}
    assert (body["status"], body["last_error"], body["tools"], body["enabled"]) == ("connecting", "", [], True)
    assert body["timeout_seconds"] == 30
    for answer in (
        response,
        operator_client.get("/api/v1/mcp-servers"),
        operator_client.get("/api/v1/mcp-servers/files"),
    ):
        assert answer.status_code == 200 or answer.status_code == 201
        assert ENV_SECRET not in answer.content.decode()


def test_create_an_http_server_and_see_its_headers_only_masked(operator_client):
    response = operator_client.post("/api/v1/mcp-servers", {**HTTP, "server_id": "remote-1"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["server_id"], body["transport"], body["url"]) == ("remote-1", "streamable_http", HTTP["url"])
    assert body["headers"] == {"Authorization": SECRET_MASK}
    assert "hdr-secret-888" not in operator_client.get("/api/v1/mcp-servers/remote-1").content.decode()


def test_http_is_accepted_as_the_streamable_http_transports_other_name(operator_client):
    response = operator_client.post("/api/v1/mcp-servers", {**HTTP, "transport": "http"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["transport"] == "streamable_http"


def test_env_and_headers_are_encrypted_at_rest(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")
    operator_client.post("/api/v1/mcp-servers", HTTP, format="json")

    with connection.cursor() as cursor:
        cursor.execute("SELECT env, headers FROM resources_mcpserver")
        raw = " ".join(str(value) for row in cursor.fetchall() for value in row)

    assert ENV_SECRET not in raw
    assert "hdr-secret-888" not in raw
    assert MCPServer.objects.get(server_id="files").env == {"API_TOKEN": ENV_SECRET}


def test_a_stdio_server_needs_a_command_and_an_http_server_an_http_url(operator_client):
    assert fields_of(
        operator_client.post("/api/v1/mcp-servers", {"name": "x", "transport": "stdio"}, format="json")
    ) == {"command": "A stdio server needs a command."}
    assert "url" in fields_of(
        operator_client.post("/api/v1/mcp-servers", {"name": "x", "transport": "http"}, format="json")
    )
    bad_url = {"name": "x", "transport": "http", "url": "ftp://files.example.com/mcp"}
    assert "http://" in fields_of(operator_client.post("/api/v1/mcp-servers", bad_url, format="json"))["url"]


def test_fields_of_the_other_transport_are_refused(operator_client):
    mixed = {**STDIO, "url": "https://mcp.example.com/mcp", "headers": {"X-A": "b"}}

    assert fields_of(operator_client.post("/api/v1/mcp-servers", mixed, format="json")) == {
        "url": "Only for http servers.",
        "headers": "Only for http servers.",
    }


def test_bad_shapes_are_named_by_field(operator_client):
    body = {**STDIO, "transport": "websocket", "args": "not-a-list", "env": {"1BAD": "x"}, "timeout_seconds": 0}

    fields = fields_of(operator_client.post("/api/v1/mcp-servers", body, format="json"))

    assert {"transport", "args", "timeout_seconds"} <= set(fields)
    assert any(key.startswith("env") for key in fields)
    assert "extra" in fields_of(operator_client.post("/api/v1/mcp-servers", {**STDIO, "extra": 1}, format="json"))


def test_a_taken_server_id_is_refused(operator_client):
    operator_client.post("/api/v1/mcp-servers", {**STDIO, "server_id": "fs"}, format="json")

    assert "server_id" in fields_of(
        operator_client.post("/api/v1/mcp-servers", {**STDIO, "server_id": "fs"}, format="json")
    )


def test_patch_with_the_mask_keeps_the_stored_env_and_a_new_value_replaces_it(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    kept = operator_client.patch(
        "/api/v1/mcp-servers/files", {"env": {"API_TOKEN": SECRET_MASK}, "name": "F"}, format="json"
    )
    assert kept.status_code == 200, kept.content
    assert MCPServer.objects.get().env == {"API_TOKEN": ENV_SECRET}
    assert kept.json()["name"] == "F"

    operator_client.patch("/api/v1/mcp-servers/files", {"env": {"API_TOKEN": "new-value", "OTHER": "x"}}, format="json")
    assert MCPServer.objects.get().env == {"API_TOKEN": "new-value", "OTHER": "x"}


def test_a_mask_with_nothing_stored_is_refused(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    fields = fields_of(operator_client.patch("/api/v1/mcp-servers/files", {"env": {"NEW": SECRET_MASK}}, format="json"))

    assert fields == {"env.NEW": "There is no stored value to keep; send the value."}


def test_switching_transport_drops_the_old_transports_fields(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    response = operator_client.patch(
        "/api/v1/mcp-servers/files", {"transport": "http", "url": HTTP["url"]}, format="json"
    )

    assert response.status_code == 200, response.content
    server = MCPServer.objects.get()
    assert (server.transport, server.command, server.args, server.env, server.url) == ("http", "", [], {}, HTTP["url"])


def test_patch_refuses_an_id_change_and_nulls(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    assert "server_id" in fields_of(
        operator_client.patch("/api/v1/mcp-servers/files", {"server_id": "x"}, format="json")
    )
    assert fields_of(operator_client.patch("/api/v1/mcp-servers/files", {"name": None}, format="json")) == {
        "name": "May not be null."
    }


def test_delete_removes_the_server(operator_client):
    operator_client.post("/api/v1/mcp-servers", STDIO, format="json")

    assert operator_client.delete("/api/v1/mcp-servers/files").status_code == 204
    assert operator_client.get("/api/v1/mcp-servers/files").status_code == 404
    assert not MCPServer.objects.exists()


def test_another_workspaces_server_answers_404(operator_client):
    other = WorkspaceFactory.create()
    MCPServer.objects.create(workspace=other, server_id="theirs", name="t", command="x")

    assert operator_client.get("/api/v1/mcp-servers").json() == {"items": []}
    for answer in (
        operator_client.get("/api/v1/mcp-servers/theirs"),
        operator_client.patch("/api/v1/mcp-servers/theirs", {"name": "mine"}, format="json"),
        operator_client.delete("/api/v1/mcp-servers/theirs"),
        operator_client.post("/api/v1/mcp-servers/theirs/refresh"),
    ):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
    assert MCPServer.objects.get().name == "t"
