"""A real MCP server for the tests, built with the `mcp` SDK (`MCPServer`, FastMCP's successor), spoken to
over stdio (`python tests/fakes/mcp_server.py`) or streamable HTTP (`... --http [--port N]`; it prints
`port N` once listening, the kernel's choice when N is 0).

Tools: `echo` and `add` (with JSON schemas), `env` (a variable of the server's environment: what the host
passed), `pid`, `huge` (a text result of `size` characters), `fail` (raises: an `isError` result),
`hang` (sleeps far past any test's timeout). `--tools a,b` keeps only some of them; `--extra NAME` adds
an `echo` under another (possibly unsanitary) name; `--token T` makes the HTTP endpoint answer 401 to a
request without `Authorization: Bearer T`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any


def build_server(*, tools: list[str] | None, extra: list[str]) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("fake-mcp", log_level="WARNING")

    def echo(text: str) -> str:
        """Answer the text sent."""
        return text

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def env(name: str) -> str:
        """The value of an environment variable of the server process ("" when unset)."""
        return os.environ.get(name, "")

    def pid() -> int:
        """The server process's id."""
        return os.getpid()

    def huge(size: int) -> str:
        """A text of `size` characters."""
        return ("0123456789abcdef" * (size // 16 + 1))[:size]

    def fail(message: str) -> str:
        """Always raises; the client sees an `isError` result carrying the message."""
        raise ToolError(message)

    async def hang() -> str:
        """Never answers within any test's patience."""
        await asyncio.sleep(3600)
        return "too late"

    for fn in (echo, add, env, pid, huge, fail, hang):
        if tools is None or fn.__name__ in tools:
            server.add_tool(fn)
    for name in extra:
        server.add_tool(echo, name=name, description=f"echo, under the name {name}")
    return server


def _token_guard(app: Any, token: str) -> Any:
    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                start = {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                await send(start)
                await send({"type": "http.response.body", "body": b"missing or wrong token"})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", default=None)
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--token", default=None)
    options = parser.parse_args(argv)
    tools = options.tools.split(",") if options.tools else None
    server = build_server(tools=tools, extra=options.extra)
    if not options.http:
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app()
    if options.token:
        app = _token_guard(app, options.token)
    # Bound here, not by uvicorn, so that with --port 0 the port is chosen by the kernel and reported on
    # stdout once listening (connections wait in the backlog until uvicorn accepts them): no window in which
    # another process takes a port picked in advance.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", options.port))
    listener.listen(128)
    print(f"port {listener.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main(sys.argv[1:])
