"""The outbound guard on MCP streamable-HTTP servers: a URL reaching loopback, private, link-local or
unspecified addresses (in any of their spellings) is refused when saved and again when connecting, unless
an operator allowed private addresses for the workspace; a name that resolves elsewhere at connect time
than when saved (DNS rebinding) is refused too; and what the target answered comes back only as a short
excerpt."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from foundation import outbound
from resources.models import MCPServer
from tests.fakes.mcp_fixtures import HttpMCP, mcp_cleanup_fixture, mcp_http_fixture  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup")]

LOOPBACK_URLS = [
    "http://127.0.0.1:8125/mcp",
    "http://localhost:8125/mcp",
    "http://2130706433:8125/mcp",
    "http://0x7f000001:8125/mcp",
    "http://[::ffff:127.0.0.1]:8125/mcp",
    "http://0.0.0.0:8125/mcp",
    "http://[2002:7f00:1::1]:8125/mcp",
    "http://169.254.169.254/latest/meta-data",
]
BODY_TAIL = "BODY-TAIL-7731"


@pytest.fixture(autouse=True)
def guard_on(settings) -> None:
    """The host-wide switch off (the suite's settings turn it on for its local fakes)."""
    settings.LANGBOT_ALLOW_PRIVATE_ADDRESSES = False
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False
    settings.LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE = False


def remote(url: str) -> dict[str, str]:
    return {"name": "Remote", "transport": "streamable_http", "url": url}


def test_loopback_and_metadata_urls_are_refused_on_save(api_client):
    for url in LOOPBACK_URLS:
        response = api_client.post("/api/v1/mcp-servers", remote(url), format="json")

        assert response.status_code == 400, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "address.not_allowed", url
        assert "allow_private_addresses" in error["details"]["fields"]["url"], url
    assert not MCPServer.objects.exists()


def test_the_same_urls_are_saved_for_a_workspace_the_operator_allowed(api_client, workspace):
    workspace.allow_private_addresses = True
    workspace.save()

    for number, url in enumerate(LOOPBACK_URLS):
        body = {**remote(url), "server_id": f"remote-{number}"}
        assert api_client.post("/api/v1/mcp-servers", body, format="json").status_code == 201, url


def test_a_url_moved_onto_loopback_by_patch_is_refused(api_client, monkeypatch):
    real_resolve = outbound.resolve
    monkeypatch.setattr(
        outbound,
        "resolve",
        lambda host, port: ["93.184.216.34"] if host == "mcp.example.com" else real_resolve(host, port),
    )
    created = api_client.post("/api/v1/mcp-servers", remote("https://mcp.example.com/mcp"), format="json")
    assert created.status_code == 201, created.content

    moved = {"url": "http://[::ffff:127.0.0.1]:8125/mcp"}
    response = api_client.patch("/api/v1/mcp-servers/remote", moved, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "address.not_allowed"
    assert MCPServer.objects.get().url == "https://mcp.example.com/mcp"


def test_a_stored_loopback_server_is_refused_when_connecting_and_reached_once_allowed(
    api_client, workspace, mcp_http: HttpMCP
):
    mcp_http.server(workspace)  # stored before the guard, as an upgraded host has it

    refused = api_client.post("/api/v1/mcp-servers/remote/refresh")

    assert refused.status_code == 502, refused.content
    error = refused.json()["error"]
    assert error["code"] == "mcp.refused"
    assert "127.0.0.1 is a loopback address" in error["message"]
    server = MCPServer.objects.get()
    assert server.status == "error"
    assert "allow_private_addresses" in server.last_error

    workspace.allow_private_addresses = True
    workspace.save()
    allowed = api_client.post("/api/v1/mcp-servers/remote/refresh")

    assert allowed.status_code == 200, allowed.content
    assert {tool["tool_name"] for tool in allowed.json()["tools"]} >= {"echo", "add"}


def test_a_name_that_resolves_to_loopback_only_when_connecting_is_refused(api_client, monkeypatch, mcp_http: HttpMCP):
    port = mcp_http.url.split(":")[2].split("/")[0]
    # Public when saved, loopback when the connection is made (DNS rebinding).
    answers = iter([["93.184.216.34"]])
    monkeypatch.setattr(outbound, "resolve", lambda host, port: next(answers, ["127.0.0.1"]))
    body = {**remote(f"http://rebind.example.com:{port}/mcp"), "headers": {"Authorization": f"Bearer {mcp_http.token}"}}
    assert api_client.post("/api/v1/mcp-servers", body, format="json").status_code == 201

    response = api_client.post("/api/v1/mcp-servers/remote/refresh")

    assert response.status_code == 502, response.content
    assert (
        "rebind.example.com resolves to 127.0.0.1, which is a loopback address" in response.json()["error"]["message"]
    )


@pytest.fixture
def json_answerer() -> Iterator[str]:
    """An HTTP endpoint on 127.0.0.1 answering every request with a large JSON body that is no MCP message."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"service": "internal-admin", "data": "A" * 3000, "tail": BODY_TAIL}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_what_the_target_answered_comes_back_only_as_a_short_excerpt(api_client, workspace, json_answerer):
    workspace.allow_private_addresses = True
    workspace.save()
    api_client.post("/api/v1/mcp-servers", {**remote(json_answerer), "timeout_seconds": 5}, format="json")

    response = api_client.post("/api/v1/mcp-servers/remote/refresh")

    assert response.status_code == 502, response.content
    message = response.json()["error"]["message"]
    assert len(message) < 500
    assert "A" * 100 not in message
    assert "A" * 100 not in MCPServer.objects.get().last_error
