"""`get_tool_detail` and `call_tool` through the real handlers against the real fake MCP server, over stdio
and streamable HTTP: the schema check before the call, tool errors as results, hangs and dead servers as
typed errors, large results as artifacts, and tools outside the snapshot or gone since the run started."""

from __future__ import annotations

import base64
import os
import time
from typing import Any

import pytest

from hostapi.tools import TOOL_RESULT_INLINE_MAX_CHARS, TOOL_RESULT_PREVIEW_CHARS
from langbot_sdk.protocol import CallToolResult, ToolDetail
from resources.mcp.services import mcp_server_refresh
from resources.models import MCPServer
from tests.factories import WorkspaceFactory
from tests.fakes.mcp_fixtures import HttpMCP, mcp_cleanup_fixture, mcp_http_fixture, stdio_server  # noqa: F401

pytestmark = pytest.mark.usefixtures("mcp_cleanup")

ENV_SECRET = "env-secret-for-the-tool-31337"


@pytest.fixture
def tool_run(host_run):
    """A run allowed `tools` of a workspace whose stdio server (or `server`) has been refreshed."""

    def make(*, tools: list[str], server: Any = None, workspace: Any = None, **run: Any):
        workspace = workspace or WorkspaceFactory.create()
        server = server(workspace) if callable(server) else stdio_server(workspace, env={"API_TOKEN": ENV_SECRET})
        mcp_server_refresh(server=server)
        return host_run(workspace=workspace, resource_policy={"allowed_tool_names": tools}, **run)

    return make


def call_tool(run, tool_name: str, **parameters: Any) -> CallToolResult:
    return CallToolResult.model_validate(run.call("call_tool", tool_name=tool_name, parameters=parameters))


def test_the_detail_is_the_tools_description_and_schema(tool_run):
    run = tool_run(tools=["add"])

    detail = ToolDetail.model_validate(run.call("get_tool_detail", tool_name="add"))

    assert (detail.tool_name, detail.description) == ("add", "Add two integers.")
    assert detail.parameters["required"] == ["a", "b"]
    assert detail.parameters["properties"]["b"]["type"] == "integer"


def test_a_call_over_stdio_returns_the_tools_text(tool_run):
    run = tool_run(tools=["add", "echo"])

    assert call_tool(run, "add", a=2, b=3) == CallToolResult(result="5", is_error=False)
    assert call_tool(run, "echo", text="héllo").result == "héllo"


def test_a_call_over_streamable_http_returns_the_tools_text(tool_run, mcp_http: HttpMCP):
    run = tool_run(tools=["echo"], server=mcp_http.server)

    assert call_tool(run, "echo", text="over http").result == "over http"


def test_the_server_gets_its_own_env_and_none_of_the_hosts(tool_run, monkeypatch):
    monkeypatch.setenv("LANGBOT_TEST_HOST_SECRET", "host-only")
    run = tool_run(tools=["env"])

    assert call_tool(run, "env", name="API_TOKEN").result == ENV_SECRET
    for name in ("LANGBOT_TEST_HOST_SECRET", "DATABASE_URL", "DJANGO_SECRET_KEY", "LANGBOT_ENCRYPTION_KEYS"):
        assert call_tool(run, "env", name=name).result == "", name
    assert os.environ["LANGBOT_TEST_HOST_SECRET"] == "host-only"


def test_invalid_arguments_are_refused_naming_where_before_the_server_is_called(tool_run):
    run = tool_run(tools=["add"])
    # Were the server called, this would be a connection failure rather than a refusal.
    MCPServer.objects.update(command="/nonexistent/mcp-server")

    wrong_type = run.refused("call_tool", tool_name="add", parameters={"a": "two", "b": 3})
    missing = run.refused("call_tool", tool_name="add", parameters={"a": 2})

    assert wrong_type.code == "invalid_argument"
    assert wrong_type.error.details["path"] == "$.a"
    assert "'two' is not of type 'integer'" in wrong_type.error.message
    assert missing.code == "invalid_argument"
    assert "'b' is a required property" in missing.error.message


def test_a_tool_that_fails_answers_an_error_result_not_a_failed_call(tool_run):
    run = tool_run(tools=["fail"])

    result = call_tool(run, "fail", message="the disk is full")

    assert result.is_error is True
    assert "the disk is full" in result.result


def test_a_hung_tool_is_deadline_exceeded_within_the_servers_timeout(tool_run):
    run = tool_run(tools=["hang", "echo"], server=lambda ws: stdio_server(ws, timeout_seconds=3))

    started = time.monotonic()
    refused = run.refused("call_tool", tool_name="hang", parameters={})

    assert refused.code == "deadline_exceeded"
    assert 2.5 < time.monotonic() - started < 6
    # The session survives a slow tool.
    assert call_tool(run, "echo", text="still here").result == "still here"


def test_a_hung_tool_is_cut_at_the_runs_deadline_when_that_comes_first(tool_run):
    run = tool_run(tools=["hang"], deadline_seconds=3)

    started = time.monotonic()
    refused = run.refused("call_tool", tool_name="hang", parameters={})

    # The server's own timeout is 15 s; the run had about 3 s left.
    assert refused.code == "deadline_exceeded"
    assert time.monotonic() - started < 6


def test_a_huge_result_is_stored_as_an_artifact_and_returned_as_a_preview_with_its_reference(tool_run):
    run = tool_run(tools=["huge"])
    size = TOOL_RESULT_INLINE_MAX_CHARS * 3

    result = call_tool(run, "huge", size=size).result

    assert result["truncated"] is True
    assert result["size"] == size
    assert len(result["preview"]) == TOOL_RESULT_PREVIEW_CHARS
    assert result["preview"].startswith("0123456789abcdef")
    read = run.call("artifact_read", artifact_id=result["artifact_id"], offset=0, length=size)
    text = base64.b64decode(read["data_base64"]).decode()
    assert len(text) == size
    assert text.startswith(result["preview"])
    assert read["eof"] is True


def test_a_result_at_the_cap_stays_inline(tool_run):
    run = tool_run(tools=["huge"])

    assert call_tool(run, "huge", size=TOOL_RESULT_INLINE_MAX_CHARS).result == (
        "0123456789abcdef" * (TOOL_RESULT_INLINE_MAX_CHARS // 16)
    )


def test_a_tool_outside_the_snapshot_is_unauthorized(tool_run):
    run = tool_run(tools=["echo"])

    assert run.refused("call_tool", tool_name="add", parameters={"a": 1, "b": 2}).code == "unauthorized"
    assert run.refused("get_tool_detail", tool_name="add").code == "unauthorized"


def test_a_tool_whose_server_was_deleted_or_disabled_since_the_run_started_is_not_found(tool_run):
    deleted = tool_run(tools=["echo"])
    disabled = tool_run(tools=["echo"])
    MCPServer.objects.filter(workspace=deleted.workspace).delete()
    MCPServer.objects.filter(workspace=disabled.workspace).update(enabled=False)

    for run in (deleted, disabled):
        assert run.refused("call_tool", tool_name="echo", parameters={"text": "x"}).code == "not_found"
        assert run.refused("get_tool_detail", tool_name="echo").code == "not_found"


def test_an_unreachable_server_is_a_retryable_error_recorded_on_it_without_its_secrets(tool_run, mcp_http: HttpMCP):
    run = tool_run(tools=["echo"], server=mcp_http.server)
    server = MCPServer.objects.get(workspace=run.workspace)
    # An edit makes a new session, which can no longer connect: the process is gone.
    server.headers = {"Authorization": "Bearer header-secret-9999"}
    server.save()
    mcp_http.process.kill()
    mcp_http.process.wait()

    refused = run.refused("call_tool", tool_name="echo", parameters={"text": "x"})

    assert refused.code == "runtime_error"
    assert refused.retryable is True
    assert refused.error.details["reason"] == "unavailable"
    assert "header-secret-9999" not in refused.error.message
    server.refresh_from_db()
    assert server.status == "error"
    assert "header-secret-9999" not in server.last_error


def test_a_broken_session_is_reconnected_once_and_the_reconnect_refreshes_the_tools(tool_run):
    run = tool_run(tools=["pid", "echo"])
    first_pid = int(call_tool(run, "pid").result)
    refreshed_before = MCPServer.objects.get(workspace=run.workspace).tools_refreshed_at
    assert refreshed_before is not None
    os.kill(first_pid, 9)

    second_pid = int(call_tool(run, "pid").result)

    assert second_pid != first_pid
    server = MCPServer.objects.get(workspace=run.workspace)
    assert server.status == "ok"
    assert server.tools_refreshed_at is not None
    assert server.tools_refreshed_at > refreshed_before
