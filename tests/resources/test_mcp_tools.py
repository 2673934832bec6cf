"""Refreshing a server against the real fake MCP server (stdio and streamable HTTP): its tools cached with
their schemas, names unique per workspace by the collision rule, `GET /tools`, and failures recorded on the
server and answered with a code, without breaking the other servers."""

from __future__ import annotations

import sys
import time

import pytest

from resources.mcp.services import mcp_server_refresh
from resources.models import MCPServer, MCPTool
from tests.fakes.mcp_fixtures import (  # noqa: F401
    HttpMCP,
    mcp_cleanup_fixture,
    mcp_http_fixture,
    mcp_refresh_inline_fixture,
    stdio_server,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup", "mcp_refresh_inline")]


@pytest.fixture(autouse=True)
def _allowed_commands(settings) -> None:
    # The fake server's interpreter, and a path that does not exist (a server that cannot start).
    settings.LANGBOT_MCP_STDIO_COMMANDS = [sys.executable, "/nonexistent/*"]


def refresh(api_client, server_id: str):
    return api_client.post(f"/api/v1/mcp-servers/{server_id}/refresh")


def names(server_id: str) -> dict[str, str]:
    """remote name → public name of a server's cached tools."""
    return dict(MCPTool.objects.filter(server__server_id=server_id).values_list("remote_name", "tool_name"))


def test_refresh_over_stdio_caches_the_tools_with_their_schemas(api_client, workspace):
    stdio_server(workspace, tools=["echo", "add"])

    response = refresh(api_client, "fake")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["last_error"]) == ("ok", "")
    assert body["tools_refreshed_at"] is not None
    assert [tool["tool_name"] for tool in body["tools"]] == ["echo", "add"]
    add = body["tools"][1]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]
    assert add["parameters"]["properties"]["a"]["type"] == "integer"


def test_refresh_over_streamable_http_sends_the_headers(api_client, workspace, mcp_http: HttpMCP):
    mcp_http.server(workspace)

    response = refresh(api_client, "remote")

    assert response.status_code == 200, response.content
    assert {tool["tool_name"] for tool in response.json()["tools"]} >= {"echo", "add", "hang"}


def test_wrong_headers_fail_the_refresh_without_echoing_them(api_client, workspace, mcp_http: HttpMCP):
    server = mcp_http.server(workspace)
    server.headers = {"Authorization": "Bearer wrong-secret-5150"}
    server.save()

    response = refresh(api_client, "remote")

    assert response.status_code == 502, response.content
    error = response.json()["error"]
    assert error["code"] == "mcp.unavailable"
    assert error["details"] == {"server_id": "remote", "status": "error"}
    assert "wrong-secret-5150" not in response.content.decode()
    server.refresh_from_db()
    assert server.status == "error"
    assert server.last_error
    assert "wrong-secret-5150" not in server.last_error


def test_a_command_that_does_not_exist_is_unavailable_and_recorded(api_client, workspace):
    MCPServer.objects.create(workspace=workspace, server_id="gone", name="g", command="/nonexistent/mcp-server")

    response = refresh(api_client, "gone")

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "mcp.unavailable"
    assert "/nonexistent/mcp-server" in response.json()["error"]["message"]
    body = api_client.get("/api/v1/mcp-servers/gone").json()
    assert body["status"] == "error"
    assert "No such file" in body["last_error"]


def test_a_server_that_never_answers_times_out_with_504(api_client, workspace):
    # A process that reads nothing and writes nothing: the handshake never completes.
    MCPServer.objects.create(
        workspace=workspace, server_id="mute", name="m", command=sys.executable,
        args=["-c", "import time; time.sleep(60)"], timeout_seconds=1,
    )  # fmt: skip

    started = time.monotonic()
    response = refresh(api_client, "mute")

    assert time.monotonic() - started < 5
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "mcp.timeout"
    assert MCPServer.objects.get(server_id="mute").status == "error"


def test_refreshing_a_disabled_server_is_refused(api_client, workspace):
    stdio_server(workspace, enabled=False)

    response = refresh(api_client, "fake")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "failed_precondition"


def test_a_failed_refresh_keeps_the_tools_cached_before(api_client, workspace):
    server = stdio_server(workspace, tools=["echo"])
    refresh(api_client, "fake")
    server.command = "/nonexistent/mcp-server"
    server.save()

    assert refresh(api_client, "fake").status_code == 502
    assert names("fake") == {"echo": "echo"}


def test_a_later_servers_same_named_tool_is_prefixed_with_its_server_id(api_client, workspace):
    stdio_server(workspace, server_id="first", tools=["echo", "add"])
    stdio_server(workspace, server_id="second", tools=["echo", "pid"])

    refresh(api_client, "first")
    refresh(api_client, "second")

    assert names("first") == {"echo": "echo", "add": "add"}
    assert names("second") == {"echo": "second__echo", "pid": "pid"}


def test_assigned_names_stay_stable_on_refresh(api_client, workspace):
    stdio_server(workspace, server_id="first", tools=["echo"])
    stdio_server(workspace, server_id="second", tools=["echo"])
    refresh(api_client, "first")
    refresh(api_client, "second")

    # The first server goes; the second's tool keeps the name bindings already use.
    api_client.delete("/api/v1/mcp-servers/first")
    refresh(api_client, "second")
    refresh(api_client, "second")

    assert names("second") == {"echo": "second__echo"}


def test_tool_names_are_sanitized_for_function_calling(api_client, workspace):
    stdio_server(workspace, tools=["echo"], extra=("search.web/v2", "x" * 70))

    refresh(api_client, "fake")

    assert names("fake") == {"echo": "echo", "search.web/v2": "search_web_v2", "x" * 70: "x" * 64}


def test_tools_the_server_no_longer_lists_are_removed(api_client, workspace):
    server = stdio_server(workspace, tools=["echo", "add"])
    refresh(api_client, "fake")
    server.args = [*server.args[:1], "--tools", "add"]
    server.save()

    refresh(api_client, "fake")

    assert names("fake") == {"add": "add"}


def test_a_failing_server_does_not_break_refreshing_or_listing_the_others(api_client, workspace):
    stdio_server(workspace, server_id="good", tools=["echo"])
    MCPServer.objects.create(workspace=workspace, server_id="bad", name="b", command="/nonexistent/mcp-server")

    assert refresh(api_client, "bad").status_code == 502
    assert refresh(api_client, "good").status_code == 200

    listed = {item["server_id"]: item["status"] for item in api_client.get("/api/v1/mcp-servers").json()["items"]}
    assert listed == {"bad": "error", "good": "ok"}
    assert [tool["tool_name"] for tool in api_client.get("/api/v1/tools").json()] == ["echo"]


def test_get_tools_lists_the_enabled_servers_tools_with_their_source(api_client, workspace):
    stdio_server(workspace, server_id="first", tools=["echo", "add"])
    stdio_server(workspace, server_id="second", tools=["echo"])
    refresh(api_client, "first")
    refresh(api_client, "second")
    api_client.patch("/api/v1/mcp-servers/first", {"enabled": False}, format="json")

    tools = api_client.get("/api/v1/tools").json()

    assert tools == [
        {
            "tool_name": "second__echo",
            "description": "Answer the text sent.",
            "parameters": tools[0]["parameters"],
            "source": "mcp:second",
        }
    ]
    assert tools[0]["parameters"]["required"] == ["text"]


def test_the_service_refresh_reuses_the_live_session(workspace):
    server = stdio_server(workspace, tools=["echo"])

    mcp_server_refresh(server=server)
    started = time.monotonic()
    mcp_server_refresh(server=server)

    # Starting the fake server takes a Python start-up and an import of the SDK; listing on a live
    # session is a round trip.
    assert time.monotonic() - started < 0.3
