"""Admin of MCP servers: env and headers stay masked, status and the last error are visible, the cached
tools are shown read-only, "Refresh tools" connects to the real fake MCP server and says what it found or
why it failed, and staff see only their workspaces' servers."""

from __future__ import annotations

import json
import sys

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from bindings.services import workspace_member_add
from foundation.crypto import SECRET_MASK
from resources.mcp.services import mcp_server_refresh
from resources.models import MCPServer
from tests.factories import UserFactory, WorkspaceFactory
from tests.fakes.mcp_fixtures import mcp_cleanup_fixture, mcp_refresh_inline_fixture, stdio_server  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup", "mcp_refresh_inline")]

SERVERS_URL = "/admin/resources/mcpserver/"


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def server_form(workspace, **overrides):
    data = {
        "workspace": str(workspace.pk),
        "server_id": "files",
        "name": "Files",
        "transport": "stdio",
        "command": "/usr/bin/npx",
        "args_input": '["-y", "server-filesystem"]',
        "env_input": '{"API_TOKEN": "env-from-admin-123"}',
        "headers_input": "{}",
        "url": "",
        "timeout_seconds": "30",
        "enabled": "on",
        "tools-TOTAL_FORMS": "0",
        "tools-INITIAL_FORMS": "0",
        "tools-MIN_NUM_FORMS": "0",
        "tools-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    data.update(overrides)
    return data


@pytest.fixture(autouse=True)
def _allowed_commands(settings) -> None:
    # The fake server's interpreter, a package runner, and a path that does not exist (a server that
    # cannot start).
    settings.LANGBOT_MCP_STDIO_COMMANDS = [sys.executable, "/usr/bin/npx", "/nonexistent/*"]


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def refresh_action(client: Client, *servers: MCPServer):
    return client.post(
        SERVERS_URL, {"action": "refresh_tools", "_selected_action": [s.pk for s in servers]}, follow=True
    )


def test_pages_render_with_secrets_masked_status_error_and_tools(admin_client, workspace):
    good = stdio_server(workspace, server_id="good", tools=["echo", "add"], env={"API_TOKEN": "env-never-shown"})
    mcp_server_refresh(server=good)
    bad = MCPServer.objects.create(
        workspace=workspace, server_id="bad", name="b", transport="http", url="http://127.0.0.1:9/mcp",
        headers={"Authorization": "Bearer hdr-never-shown"}, status="error", last_error="could not connect: refused",
    )  # fmt: skip

    pages = [
        admin_client.get(SERVERS_URL),
        admin_client.get(f"{SERVERS_URL}{good.pk}/change/"),
        admin_client.get(f"{SERVERS_URL}{bad.pk}/change/"),
        admin_client.get(f"{SERVERS_URL}add/"),
    ]

    assert [page.status_code for page in pages] == [200] * 4
    listing, good_page, bad_page = (page.content.decode() for page in pages[:3])
    assert "could not connect: refused" in listing
    assert "#c62828" in listing  # the failing server's status in red
    assert "#2e7d32" in listing
    assert SECRET_MASK in good_page
    assert "Add two integers." in good_page  # the cached tools, inline
    assert "could not connect: refused" in bad_page
    for page in pages:
        assert "env-never-shown" not in page.content.decode()
        assert "hdr-never-shown" not in page.content.decode()


def test_a_server_added_in_admin_is_stored_with_its_env(admin_client, workspace):
    response = admin_client.post(f"{SERVERS_URL}add/", server_form(workspace))

    assert response.status_code == 302, response.context["adminform"].form.errors
    server = MCPServer.objects.get()
    assert (server.command, server.args, server.env) == (
        "/usr/bin/npx",
        ["-y", "server-filesystem"],
        {"API_TOKEN": "env-from-admin-123"},
    )


def test_saving_the_change_form_with_the_mask_keeps_the_env(admin_client, workspace):
    server = stdio_server(workspace, env={"API_TOKEN": "keep-me-please"})
    form = server_form(
        workspace, server_id=server.server_id, command=server.command, args_input=json.dumps(server.args),
        env_input=json.dumps({"API_TOKEN": SECRET_MASK}), name="Renamed",
    )  # fmt: skip

    response = admin_client.post(f"{SERVERS_URL}{server.pk}/change/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    server.refresh_from_db()
    assert (server.name, server.env) == ("Renamed", {"API_TOKEN": "keep-me-please"})


def test_transport_rules_are_shown_on_their_fields(admin_client, workspace):
    no_command = admin_client.post(f"{SERVERS_URL}add/", server_form(workspace, command=""))
    no_url = admin_client.post(
        f"{SERVERS_URL}add/", server_form(workspace, transport="http", args_input="[]", env_input="{}")
    )

    assert "command" in no_command.context["adminform"].form.errors
    assert "url" in no_url.context["adminform"].form.errors
    assert not MCPServer.objects.exists()


def test_refresh_tools_says_how_many_tools_it_found(admin_client, workspace):
    server = stdio_server(workspace, server_id="fake", tools=["echo", "add"])

    response = refresh_action(admin_client, server)

    assert messages_of(response) == ["fake: connected; 2 tool(s): echo, add"]
    server.refresh_from_db()
    assert server.status == "ok"
    assert server.tools.count() == 2


def test_refresh_tools_shows_a_failing_servers_error_and_still_refreshes_the_others(admin_client, workspace):
    bad = MCPServer.objects.create(
        workspace=workspace, server_id="bad", name="b", command="/nonexistent/mcp-server",
        env={"API_TOKEN": "tok-admin-secret-42"},
    )  # fmt: skip
    good = stdio_server(workspace, server_id="good", tools=["echo"])

    response = refresh_action(admin_client, bad, good)

    bad_message, good_message = messages_of(response)
    assert bad_message.startswith("bad: could not connect: FileNotFoundError")
    assert good_message == "good: connected; 1 tool(s): echo"
    assert "tok-admin-secret-42" not in response.content.decode()
    bad.refresh_from_db()
    assert bad.status == "error"


def test_staff_see_only_the_servers_of_their_workspaces(workspace):
    user = UserFactory.create(username="staff", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="resources"))
    workspace_member_add(workspace=workspace, user=user)
    mine = MCPServer.objects.create(workspace=workspace, server_id="mine", name="m", command="x")
    theirs = MCPServer.objects.create(workspace=WorkspaceFactory.create(), server_id="theirs", name="t", command="x")
    client = Client()
    client.force_login(user)

    listing = client.get(SERVERS_URL).content.decode()

    assert "mine" in listing
    assert "theirs" not in listing
    assert client.get(f"{SERVERS_URL}{theirs.pk}/change/").status_code == 302
    assert client.get(f"{SERVERS_URL}{mine.pk}/change/").status_code == 200
