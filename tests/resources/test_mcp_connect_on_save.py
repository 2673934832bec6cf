"""A saved MCP server connects by itself: creating one, enabling one or changing how it connects answers at
once with `status: connecting` and sends a worker, once the transaction commits, to connect and list the
tools; the REST answers and the admin's list then show `ok` with the tools, or `error` with the reason. A
rename or a new timeout does not connect again. The worker's task runs here, in this process, when the test
runs the commit callbacks (the real worker's side: tests/integration/test_mcp_stdio_in_worker.py)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from bindings.services import api_key_create
from resources import tasks
from resources.models import MCPServer
from tests.factories import UserFactory
from tests.fakes.mcp_fixtures import (  # noqa: F401
    SERVER_SCRIPT,
    HttpMCP,
    mcp_cleanup_fixture,
    mcp_http_fixture,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup")]

SERVERS_URL = "/admin/resources/mcpserver/"
PROBE_SCRIPT = str(Path(SERVER_SCRIPT).with_name("mcp_probe_server.py"))
CALC = {
    "server_id": "calc",
    "name": "Calculator",
    "transport": "stdio",
    "command": sys.executable,
    "args": [SERVER_SCRIPT, "--tools", "add,echo"],
}


def statuses_listed(client: Client) -> list[str]:
    """The status column of the admin's change list (its coloured cells)."""
    page = client.get(SERVERS_URL)
    assert page.status_code == 200
    return re.findall(r'<b style="color: #[0-9a-f]{6}">([^<]+)</b>', page.content.decode())


@pytest.fixture(autouse=True)
def _allowed_commands(settings) -> None:
    settings.LANGBOT_MCP_STDIO_COMMANDS = [sys.executable]


@pytest.fixture
def operator_client(workspace) -> APIClient:
    _, key = api_key_create(workspace=workspace, is_operator=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The connect tasks sent; each runs at once in this process, as Celery's eager mode would."""
    sent: list[tuple[Any, ...]] = []

    def delay(*args: Any) -> None:
        sent.append(args)
        tasks.mcp_server_connect.apply(args=args)

    monkeypatch.setattr(tasks.mcp_server_connect, "delay", delay)
    return sent


@pytest.fixture
def saved(django_capture_on_commit_callbacks) -> Callable[..., Any]:
    """`saved(request)`: make the request, then commit it as a worker would see it (its on-commit callbacks
    run after the answer is taken, so the answer shows the server as the save left it)."""

    def run(request: Callable[[], Any]) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return request()

    return run


def test_a_created_server_answers_connecting_and_lists_its_tools_once_a_worker_connected(
    operator_client, connects, saved
):
    # when an operator creates a stdio server
    response = saved(lambda: operator_client.post("/api/v1/mcp-servers", CALC, format="json"))

    # then the create answered before any connection: connecting, no tools yet
    assert response.status_code == 201, response.content
    assert (response.json()["status"], response.json()["tools"]) == ("connecting", [])
    # and one connect was sent to a worker, which listed the tools without anyone asking for a refresh
    assert len(connects) == 1
    body = operator_client.get("/api/v1/mcp-servers/calc").json()
    assert (body["status"], body["last_error"]) == ("ok", "")
    assert {tool["tool_name"] for tool in body["tools"]} == {"add", "echo"}
    assert body["tools_refreshed_at"] is not None
    assert {tool["tool_name"] for tool in operator_client.get("/api/v1/tools").json()} == {"add", "echo"}


def test_a_created_http_server_lists_its_tools_in_the_background(api_client, connects, saved, mcp_http: HttpMCP):
    # when a workspace key creates a streamable-HTTP server
    spec = {
        "server_id": "remote",
        "name": "Remote",
        "transport": "streamable_http",
        "url": mcp_http.url,
        "headers": {"Authorization": f"Bearer {mcp_http.token}"},
    }
    response = saved(lambda: api_client.post("/api/v1/mcp-servers", spec, format="json"))

    # then it answered connecting, and a worker connected and listed the fake server's tools
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "connecting"
    body = api_client.get("/api/v1/mcp-servers/remote").json()
    assert body["status"] == "ok", body["last_error"]
    assert body["tools"]


def test_a_created_server_that_cannot_start_shows_the_error_and_its_stderr(operator_client, connects, saved):
    # when the server created dies at start, saying why on stderr
    spec = {
        **CALC,
        "server_id": "broken",
        "args": [PROBE_SCRIPT, "--stderr", "ModuleNotFoundError: No module named 'calc_tools'", "--exit"],
    }
    response = saved(lambda: operator_client.post("/api/v1/mcp-servers", spec, format="json"))

    # then the create still succeeded, and the server's status says what the worker found
    assert response.status_code == 201, response.content
    body = operator_client.get("/api/v1/mcp-servers/broken").json()
    assert body["status"] == "error"
    assert "No module named 'calc_tools'" in body["last_error"]
    assert body["tools"] == []


def test_a_rename_or_a_new_timeout_does_not_connect_again_but_new_args_do(operator_client, connects, saved):
    # given a connected server
    saved(lambda: operator_client.post("/api/v1/mcp-servers", CALC, format="json"))
    assert len(connects) == 1

    # when it is renamed and given a new timeout
    renamed = saved(
        lambda: operator_client.patch(
            "/api/v1/mcp-servers/calc", {"name": "Calc", "timeout_seconds": 20}, format="json"
        )
    )

    # then nothing connects again and it stays as it was
    assert renamed.status_code == 200, renamed.content
    assert (renamed.json()["status"], len(renamed.json()["tools"])) == ("ok", 2)
    assert len(connects) == 1

    # when its args change (another tool list)
    changed = saved(
        lambda: operator_client.patch(
            "/api/v1/mcp-servers/calc", {"args": [SERVER_SCRIPT, "--tools", "echo"]}, format="json"
        )
    )

    # then it answers connecting, and a worker lists the new tools
    assert changed.json()["status"] == "connecting"
    assert len(connects) == 2
    body = operator_client.get("/api/v1/mcp-servers/calc").json()
    assert (body["status"], [tool["tool_name"] for tool in body["tools"]]) == ("ok", ["echo"])


def test_a_disabled_server_connects_when_enabled_and_a_disabled_one_no_longer_shows_connecting(
    operator_client, connects, django_capture_on_commit_callbacks
):
    # given a server created disabled: nothing connects
    with django_capture_on_commit_callbacks(execute=True):
        created = operator_client.post("/api/v1/mcp-servers", {**CALC, "enabled": False}, format="json")
    assert (created.json()["status"], connects) == ("unknown", [])

    # when it is enabled (and the worker has not answered yet)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        enabled = operator_client.patch("/api/v1/mcp-servers/calc", {"enabled": True}, format="json")

    # then it shows connecting
    assert enabled.json()["status"] == "connecting"

    # when it is disabled again before the worker got to it
    disabled = operator_client.patch("/api/v1/mcp-servers/calc", {"enabled": False}, format="json")
    for callback in callbacks:
        callback()

    # then it no longer claims to be connecting, and the late worker left it alone
    assert disabled.json()["status"] == "unknown"
    assert len(connects) == 1
    body = operator_client.get("/api/v1/mcp-servers/calc").json()
    assert (body["status"], body["tools"]) == ("unknown", [])


def test_a_connect_for_settings_saved_over_is_left_to_the_later_save(
    operator_client, django_capture_on_commit_callbacks
):
    # given a server saved twice before any worker connected (the connects not run yet)
    with django_capture_on_commit_callbacks(execute=False):
        operator_client.post("/api/v1/mcp-servers", {**CALC, "args": [SERVER_SCRIPT, "--tools", "add"]}, format="json")
    first = MCPServer.objects.get(server_id="calc").updated_at.isoformat()
    with django_capture_on_commit_callbacks(execute=False):
        operator_client.patch("/api/v1/mcp-servers/calc", {"args": CALC["args"]}, format="json")
    server = MCPServer.objects.get(server_id="calc")
    assert server.status == MCPServer.Status.CONNECTING

    # when the first save's connect runs
    tasks.mcp_server_connect.apply(args=(server.pk, first))

    # then it does nothing: the settings it was sent for are gone
    server.refresh_from_db()
    assert (server.status, server.tools.count()) == (MCPServer.Status.CONNECTING, 0)

    # when the later save's connect runs
    tasks.mcp_server_connect.apply(args=(server.pk, server.updated_at.isoformat()))

    # then the server shows the tools of the settings it has now
    server.refresh_from_db()
    assert server.status == MCPServer.Status.OK
    assert sorted(server.tools.values_list("tool_name", flat=True)) == ["add", "echo"]


def test_a_server_added_in_the_admin_connects_and_the_list_shows_its_status(
    workspace, connects, django_capture_on_commit_callbacks
):
    # given staff in the admin
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    form = {
        "workspace": str(workspace.pk),
        "server_id": "calc",
        "name": "Calculator",
        "transport": "stdio",
        "command": sys.executable,
        "args_input": f'["{SERVER_SCRIPT}", "--tools", "add,echo"]',
        "env_input": "{}",
        "headers_input": "{}",
        "url": "",
        "timeout_seconds": "15",
        "enabled": "on",
        "tools-TOTAL_FORMS": "0",
        "tools-INITIAL_FORMS": "0",
        "tools-MIN_NUM_FORMS": "0",
        "tools-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }

    # when they add a server (the worker not sent yet: the save has not committed)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/admin/resources/mcpserver/add/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]

    # then the change list shows it connecting
    assert statuses_listed(client) == ["connecting"]

    # when the save's worker connects
    for callback in callbacks:
        callback()

    # then one connect was sent, and the change list shows the server connected with its two tools
    assert len(connects) == 1
    assert statuses_listed(client) == ["connected"]
    server = MCPServer.objects.get(server_id="calc")
    assert (server.status, server.tools.count()) == (MCPServer.Status.OK, 2)
