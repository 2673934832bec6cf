"""A stdio MCP server (the `mcp` SDK's `MCPServer`) that tells the tests how the host started it: at start it
writes `{"pid", "ppid", "cwd", "environ"}` as JSON to the file named by `--report`, then serves one tool,
`probe`. `--stderr TEXT --exit` writes TEXT to stderr and exits with status 1 before speaking MCP (a server
that dies at start); `--count FILE` makes `slow_count` append a line to FILE, then answer after `--delay`
seconds (a call whose server may die under it)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", default=None)
    parser.add_argument("--stderr", default=None)
    parser.add_argument("--exit", action="store_true")
    parser.add_argument("--count", default=None)
    parser.add_argument("--delay", type=float, default=30.0)
    options = parser.parse_args(argv)
    if options.report:
        report = {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "environ": dict(os.environ)}
        with open(options.report, "w", encoding="utf-8") as file:
            json.dump(report, file)
    if options.stderr:
        print(options.stderr, file=sys.stderr, flush=True)
    if options.exit:
        sys.exit(1)

    from mcp.server.mcpserver import MCPServer

    server = MCPServer("probe-mcp", log_level="WARNING")

    def probe() -> str:
        """The server's working directory."""
        return os.getcwd()

    def count() -> None:
        if options.count:
            with open(options.count, "a", encoding="utf-8") as file:
                file.write(f"{os.getpid()}\n")

    async def slow_count() -> str:
        """Counts this execution in the --count file, then answers after --delay seconds."""
        count()
        await asyncio.sleep(options.delay)
        return "counted"

    server.add_tool(probe)
    server.add_tool(slow_count)
    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
