"""Only an operator makes the host run a program: a workspace's ordinary key cannot add a stdio MCP server or
change what one runs, an operator key can only with a command on LANGBOT_MCP_STDIO_COMMANDS, a stored
server whose command left the list does not start, and a server that starts gets a minimal environment
(no host secret) and a scratch working directory of its own, gone when its session closes. Refreshes run
in this process as a worker would (`mcp_refresh_inline`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from bindings.services import api_key_create
from foundation.crypto import SECRET_MASK
from resources.mcp.client import MCPClientError, MCPServerConfig, mcp_connections_close_all, mcp_tools_list
from resources.models import MCPServer
from tests.fakes.mcp_fixtures import mcp_cleanup_fixture, mcp_refresh_inline_fixture  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup", "mcp_refresh_inline")]

PROBE = str(Path(__file__).resolve().parent.parent / "fakes" / "mcp_probe_server.py")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SETTING = "LANGBOT_MCP_STDIO_COMMANDS"
# What a web or worker process of the host holds in its environment, none of which a server may see.
HOST_SECRETS = {
    "DATABASE_URL": "postgres://langbot:db-secret-4411@127.0.0.1:5432/langbot",
    "DJANGO_SECRET_KEY": "django-secret-4412",
    "LANGBOT_RUNTIME_TOKEN": "runtime-token-4413",
    "LANGBOT_ENCRYPTION_KEYS": "encryption-key-4414",
    "LANGBOT_LANGBOT_RUNTIME_TOKEN": "lbp-token-4415",
}
# The SDK's safe set, and what Python's locale coercion may add to a child's environment.
SAFE_NAMES = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}


@pytest.fixture(autouse=True)
def _allowed_commands(settings) -> None:
    settings.LANGBOT_MCP_STDIO_COMMANDS = [sys.executable]


@pytest.fixture
def operator_client(workspace) -> APIClient:
    _, key = api_key_create(workspace=workspace, is_operator=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def probe(report: Path, *, command: str = sys.executable, **fields: object) -> dict[str, object]:
    return {
        "name": "Probe",
        "server_id": "probe",
        "transport": "stdio",
        "command": command,
        "args": [PROBE, "--report", str(report)],
        **fields,
    }


def refusal_of(response) -> dict[str, Any]:
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "mcp.stdio_not_allowed"
    assert error["details"]["setting"] == SETTING
    return error


def test_an_ordinary_workspace_key_cannot_add_a_stdio_server(api_client, tmp_path):
    report = tmp_path / "report.json"

    response = api_client.post("/api/v1/mcp-servers", probe(report), format="json")

    error = refusal_of(response)
    assert "operator" in error["message"]
    assert error["details"]["required_scope"] == "operator"
    assert not MCPServer.objects.exists()
    assert not report.exists()


def test_an_ordinary_key_cannot_make_a_server_stdio_or_change_what_it_runs(api_client, operator_client, tmp_path):
    report = tmp_path / "report.json"
    assert operator_client.post("/api/v1/mcp-servers", probe(report), format="json").status_code == 201
    remote = {
        "name": "Remote",
        "server_id": "remote",
        "transport": "streamable_http",
        "url": "https://mcp.example.com/mcp",
    }
    assert api_client.post("/api/v1/mcp-servers", remote, format="json").status_code == 201

    changes = [
        ("remote", {"transport": "stdio", "command": sys.executable, "args": [PROBE]}),
        ("probe", {"command": "/bin/sh"}),
        ("probe", {"args": ["-c", "id > proof.txt"]}),
        ("probe", {"env": {"PYTHONSTARTUP": "/tmp/x.py"}}),
    ]
    for server_id, change in changes:
        refusal_of(api_client.patch(f"/api/v1/mcp-servers/{server_id}", change, format="json"))

    renamed = api_client.patch("/api/v1/mcp-servers/probe", {"name": "Renamed", "timeout_seconds": 5}, format="json")
    assert renamed.status_code == 200, renamed.content
    stored = MCPServer.objects.get(server_id="probe")
    assert (stored.name, stored.command, stored.args, stored.env) == (
        "Renamed",
        sys.executable,
        [PROBE, "--report", str(report)],
        {},
    )
    assert MCPServer.objects.get(server_id="remote").transport == "http"


def test_an_operator_key_adds_an_allowlisted_command_and_its_refresh_lists_the_tools(operator_client, tmp_path):
    created = operator_client.post("/api/v1/mcp-servers", probe(tmp_path / "report.json"), format="json")
    assert created.status_code == 201, created.content

    response = operator_client.post("/api/v1/mcp-servers/probe/refresh")

    assert response.status_code == 200, response.content
    assert [tool["tool_name"] for tool in response.json()["tools"]] == ["probe", "slow_count"]


def test_an_operator_key_is_refused_a_command_off_the_allowlist(operator_client, settings, tmp_path):
    report = tmp_path / "report.json"
    interpreter = Path(sys.executable)
    dotted = f"{interpreter.parent}/../{interpreter.parent.name}/{interpreter.name}"

    off_list = refusal_of(operator_client.post("/api/v1/mcp-servers", probe(report, command="/bin/sh"), format="json"))
    bare = refusal_of(operator_client.post("/api/v1/mcp-servers", probe(report, command="python3"), format="json"))
    dots = refusal_of(operator_client.post("/api/v1/mcp-servers", probe(report, command=dotted), format="json"))
    settings.LANGBOT_MCP_STDIO_COMMANDS = []
    off = refusal_of(operator_client.post("/api/v1/mcp-servers", probe(report), format="json"))

    assert "/bin/sh is not allowed" in str(off_list["message"])
    assert "absolute" in str(bare["message"])
    assert "absolute" in str(dots["message"])
    assert "off on this host" in str(off["message"])
    for error in (off_list, bare, dots, off):
        assert SETTING in str(error["message"])
        assert "required_scope" not in error["details"]
    assert not MCPServer.objects.exists()
    assert not report.exists()


def test_an_allowlist_pattern_admits_the_commands_it_matches(operator_client, settings, tmp_path):
    settings.LANGBOT_MCP_STDIO_COMMANDS = ["/usr/bin/uvx", f"{Path(sys.executable).parent}/*"]

    response = operator_client.post("/api/v1/mcp-servers", probe(tmp_path / "report.json"), format="json")

    assert response.status_code == 201, response.content


def test_a_stored_server_whose_command_left_the_allowlist_does_not_start(api_client, workspace, settings, tmp_path):
    report = tmp_path / "report.json"
    server = MCPServer.objects.create(
        workspace=workspace, server_id="probe", name="p", command=sys.executable, args=[PROBE, "--report", str(report)]
    )
    settings.LANGBOT_MCP_STDIO_COMMANDS = ["/usr/bin/uvx"]

    response = api_client.post("/api/v1/mcp-servers/probe/refresh")
    with pytest.raises(MCPClientError) as called:  # what a run's tool call connects through
        mcp_tools_list(MCPServerConfig.of(server))

    refusal_of(response)
    assert (called.value.kind, called.value.connecting) == ("refused", True)
    assert SETTING in called.value.message
    server.refresh_from_db()
    assert server.status == "error"
    assert server.last_error.startswith("not started:")
    assert SETTING in server.last_error
    assert not report.exists()


def test_a_stdio_server_starts_with_a_minimal_environment_in_a_scratch_directory(
    operator_client, monkeypatch, tmp_path
):
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    report = tmp_path / "report.json"
    body = probe(report, env={"SERVER_TOKEN": "the-servers-own-value"})
    assert operator_client.post("/api/v1/mcp-servers", body, format="json").status_code == 201

    assert operator_client.post("/api/v1/mcp-servers/probe/refresh").status_code == 200

    started = json.loads(report.read_text())
    environ: dict[str, str] = started["environ"]
    assert set(environ) <= SAFE_NAMES | {"SERVER_TOKEN"}
    assert environ["SERVER_TOKEN"] == "the-servers-own-value"
    assert environ["PATH"] == os.environ["PATH"]
    for secret in HOST_SECRETS.values():
        assert secret not in report.read_text()
    cwd = Path(started["cwd"])
    assert cwd.is_dir()
    assert cwd.parent.name.startswith("langbot-mcp-")
    assert REPO_ROOT not in (cwd, *cwd.parents)
    assert Path.cwd() != cwd
    mcp_connections_close_all()
    assert not cwd.exists()
    assert not cwd.parent.exists()


def test_each_session_gets_a_fresh_scratch_directory(operator_client, tmp_path):
    report = tmp_path / "report.json"
    operator_client.post("/api/v1/mcp-servers", probe(report), format="json")
    operator_client.post("/api/v1/mcp-servers/probe/refresh")
    first = json.loads(report.read_text())["cwd"]
    mcp_connections_close_all()

    operator_client.post("/api/v1/mcp-servers/probe/refresh")

    assert json.loads(report.read_text())["cwd"] != first


def test_a_server_that_dies_at_start_shows_its_stderr_with_secrets_masked(operator_client, tmp_path):
    body = probe(
        tmp_path / "report.json",
        args=[PROBE, "--stderr", "ModuleNotFoundError: No module named 'mcp_tools' (key tok-stderr-5150)", "--exit"],
        env={"API_TOKEN": "tok-stderr-5150"},
    )
    operator_client.post("/api/v1/mcp-servers", body, format="json")

    response = operator_client.post("/api/v1/mcp-servers/probe/refresh")

    assert response.status_code == 502, response.content
    server = MCPServer.objects.get(server_id="probe")
    assert "ModuleNotFoundError: No module named 'mcp_tools'" in server.last_error
    assert f"(key {SECRET_MASK})" in server.last_error
    assert "tok-stderr-5150" not in server.last_error
    assert "tok-stderr-5150" not in response.content.decode()
    assert "ModuleNotFoundError" in response.json()["error"]["message"]
