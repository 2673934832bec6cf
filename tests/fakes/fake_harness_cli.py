"""A fake Claude Code-style CLI for the harness-agent tests: `python tests/fakes/fake_harness_cli.py [-p]
[--output-format stream-json] [--verbose] [--mcp-config PATH] [--resume SESSION] [PROMPT]`.

It behaves as the real CLI would toward the runner: it reads the prompt (stdin unless given as the last
argument), reads the projected files of its working directory (`agent-context.json`, `LANGBOT_CONTEXT.md`,
`.claude/skills/*/SKILL.md`, the MCP config), connects to the `langbot` MCP server of the config with the
`mcp` client SDK and the bearer token written there, calls its tools, and prints Claude Code's stream-json
lines. What it saw is written to `fake-harness-report.json` in its working directory for the test to read.

`FAKE_HARNESS_MODE` picks a behaviour: `bridge` (default, above), `crash` (stderr, status 3), `silent` (no
output), `error-result` (a result line with is_error), `hang` (starts a child in its process group, writes both
pids to `fake-harness-pids.json`, then sleeps), `plain` (answers without the bridge).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPORT = "fake-harness-report.json"
PIDS = "fake-harness-pids.json"


def emit(item: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(item) + "\n")
    sys.stdout.flush()


async def call_bridge(config: dict[str, Any]) -> dict[str, Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    server = config["mcpServers"]["langbot"]
    answers: dict[str, Any] = {"url": server["url"], "authorization": server["headers"]["Authorization"]}
    async with (
        httpx2.AsyncClient(headers=server["headers"], timeout=30) as http,
        Client(streamable_http_client(server["url"], http_client=http)) as client,
    ):
        listed = await client.session.list_tools()
        answers["tools"] = sorted(tool.name for tool in listed.tools)

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            result = await client.session.call_tool(name, arguments)
            text = "".join(getattr(part, "text", "") for part in result.content)
            if result.is_error:
                return {"error": text}
            return json.loads(text)

        answers["current_event"] = await call("langbot_current_event", {})
        if "langbot_history_page" in answers["tools"]:
            answers["history_page"] = await call("langbot_history_page", {"limit": 10})
        if "langbot_history_search" in answers["tools"]:
            answers["history_search"] = await call("langbot_history_search", {"query": "deploy", "top_k": 3})
        if "langbot_knowledge_retrieve" in answers["tools"]:
            answers["knowledge"] = await call("langbot_knowledge_retrieve", {"kb_id": "kb-docs", "query": "deploy"})
            answers["knowledge_denied"] = await call("langbot_knowledge_retrieve", {"kb_id": "kb-secret", "query": "x"})
        if "langbot_artifact_read" in answers["tools"]:
            answers["artifact_read"] = await call("langbot_artifact_read", {"artifact_id": "artifact-notes"})
            answers["artifact_denied"] = await call("langbot_artifact_read", {"artifact_id": "someone-elses"})
        if "langbot_call_tool" in answers["tools"]:
            answers["tool"] = await call("langbot_call_tool", {"tool_name": "weather", "arguments": {"city": "Paris"}})
    # A request without the token is refused.
    async with httpx2.AsyncClient(timeout=10) as http:
        answers["without_token_status"] = (await http.post(server["url"], json={})).status_code
    return answers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", action="store_true")
    parser.add_argument("--output-format")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--mcp-config")
    parser.add_argument("--resume")
    parser.add_argument("prompt", nargs="?")
    options = parser.parse_args()
    mode = os.environ.get("FAKE_HARNESS_MODE", "bridge")
    prompt = options.prompt if options.prompt is not None else sys.stdin.read()
    cwd = Path.cwd()

    if mode == "crash":
        print(f"fatal: could not reach the model (key {os.environ.get('FAKE_HARNESS_SECRET', '')})", file=sys.stderr)
        return 3
    if mode == "silent":
        return 0

    session_id = options.resume or f"sess-{uuid.uuid4().hex[:10]}"
    emit({"type": "system", "subtype": "init", "session_id": session_id, "cwd": str(cwd), "tools": []})

    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (cwd / PIDS).write_text(json.dumps({"cli": os.getpid(), "child": child.pid}))
        time.sleep(600)
        return 0
    if mode == "error-result":
        emit({"type": "result", "subtype": "error_during_execution", "is_error": True, "result": "model overloaded",
              "session_id": session_id})  # fmt: skip
        return 1

    mcp_path = Path(options.mcp_config) if options.mcp_config else cwd / ".mcp.json"
    mcp_config = json.loads(mcp_path.read_text())
    report: dict[str, Any] = {
        "prompt": prompt,
        "argv": sys.argv[1:],
        "resume": options.resume,
        "context": json.loads((cwd / "agent-context.json").read_text()),
        "markdown": (cwd / "LANGBOT_CONTEXT.md").read_text(),
        "skills": {p.parent.name: p.read_text() for p in sorted(cwd.glob(".claude/skills/*/SKILL.md"))},
        "mcp_config": mcp_config,
        "mcp_config_mode": oct(mcp_path.stat().st_mode & 0o777),
        "env": {k: v for k, v in os.environ.items() if k.startswith("LANGBOT_")},
    }
    if mode == "bridge":
        report["bridge"] = asyncio.run(call_bridge(mcp_config))
    (cwd / REPORT).write_text(json.dumps(report, indent=2))

    emit({"type": "assistant", "session_id": session_id, "message": {"id": "msg-1", "role": "assistant", "content": [
        {"type": "text", "text": "Let me look at the conversation."},
        {"type": "tool_use", "id": "toolu_1", "name": "mcp__langbot__langbot_history_page", "input": {"limit": 10}},
    ]}})  # fmt: skip
    history = report.get("bridge", {}).get("history_page", {})
    emit({"type": "user", "session_id": session_id, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": json.dumps(history)}]},
    ]}})  # fmt: skip
    answer = f"You said: {prompt.strip()}"
    for piece in ("You said: ", prompt.strip()):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        emit({"type": "stream_event", "session_id": session_id, "event": delta})
    emit({"type": "assistant", "session_id": session_id,
          "message": {"id": "msg-2", "role": "assistant", "content": [{"type": "text", "text": answer}]}})  # fmt: skip
    emit({"type": "result", "subtype": "success", "is_error": False, "result": answer, "session_id": session_id,
          "num_turns": 2, "duration_ms": 1234, "total_cost_usd": 0.0123,
          "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 300,
                    "output_tokens": 42}})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
