"""MCP server rows pointing at the real fake server (`tests/fakes/mcp_server.py`), over stdio or over
streamable HTTP on a localhost port the kernel picks, and the fixture that closes this process's sessions after a
test (so no stdio server outlives it). Test modules import the fixtures they use (`*_fixture`, registered
under the name without the suffix)."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from resources.mcp.client import mcp_connections_close_all
from resources.models import MCPServer

SERVER_SCRIPT = str(Path(__file__).with_name("mcp_server.py"))
HTTP_TOKEN = "tok-http-secret-4242"


def stdio_server(
    workspace: Any,
    *,
    server_id: str = "fake",
    tools: list[str] | None = None,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout_seconds: int = 15,
    enabled: bool = True,
) -> MCPServer:
    """A stdio server row that runs the fake server with this interpreter."""
    args = [SERVER_SCRIPT]
    if tools is not None:
        args += ["--tools", ",".join(tools)]
    for name in extra:
        args += ["--extra", name]
    return MCPServer.objects.create(
        workspace=workspace,
        server_id=server_id,
        name=server_id,
        transport=MCPServer.Transport.STDIO,
        command=sys.executable,
        args=args,
        env=env or {},
        timeout_seconds=timeout_seconds,
        enabled=enabled,
    )


@dataclass
class HttpMCP:
    url: str
    token: str
    process: subprocess.Popen[bytes]

    def server(self, workspace: Any, *, server_id: str = "remote", timeout_seconds: int = 15) -> MCPServer:
        return MCPServer.objects.create(
            workspace=workspace,
            server_id=server_id,
            name=server_id,
            transport=MCPServer.Transport.HTTP,
            url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout_seconds=timeout_seconds,
        )


@pytest.fixture(name="mcp_cleanup")
def mcp_cleanup_fixture() -> Iterator[None]:
    yield
    mcp_connections_close_all()


@pytest.fixture(name="mcp_refresh_inline")
def mcp_refresh_inline_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh the web sends to a worker (every stdio server's) runs in this process at once, as Celery's
    eager mode would: REST and admin tests see its outcome in their answer."""
    from resources import tasks

    monkeypatch.setattr(tasks.mcp_server_refresh, "delay", lambda *args: tasks.mcp_server_refresh.apply(args=args))


@pytest.fixture(name="mcp_http")
def mcp_http_fixture(mcp_cleanup: None) -> Iterator[HttpMCP]:
    """The fake server over streamable HTTP (a subprocess on a free port), requiring `HTTP_TOKEN`."""
    process = subprocess.Popen(
        [sys.executable, SERVER_SCRIPT, "--http", "--port", "0", "--token", HTTP_TOKEN], stdout=subprocess.PIPE
    )
    try:
        # The server binds first and then names its port: readiness and the port in one line.
        assert process.stdout is not None
        ready = select.select([process.stdout], [], [], 20)[0]
        line = process.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            raise RuntimeError(f"the fake MCP HTTP server did not start: {line!r}")
        port = int(line.split()[1])
        yield HttpMCP(url=f"http://127.0.0.1:{port}/mcp", token=HTTP_TOKEN, process=process)
    finally:
        mcp_connections_close_all()
        process.kill()
        process.wait(timeout=10)
