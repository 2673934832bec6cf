"""The scripted in-process host of `host.py`, widened for the harness runner: it issues a run token per run
and refuses proxy calls whose token is not a live run's (as the real host does), and answers the history,
event, knowledge and tool calls the host bridge forwards — with the authorization the real host applies
(knowledge bases and tools outside the run's resources answer `unauthorized`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langbot_sdk.protocol import (
    AgentAPIException,
    AgentEventRecord,
    ArtifactReadResult,
    CallToolResult,
    HistoryPage,
    HistorySearchHit,
    HistorySearchResult,
    KnowledgeEntry,
    RetrieveKnowledgeBaseResult,
    TranscriptItem,
)
from langbot_sdk.runtime.loader import load_plugins
from langbot_sdk.runtime.service import RuntimeService
from langbot_sdk.wire import CallInfo, Connection
from langbot_sdk.wire.memory import memory_transport_pair
from tests.external_runners.host import PLUGINS_DIR, REPO_ROOT, ScriptedHost

RUNNER_ID = "plugin:langbot/harness-agent/default"
HARNESS_PLUGIN_DIR = PLUGINS_DIR / "harness-agent"

if str(HARNESS_PLUGIN_DIR) not in sys.path:
    # The plugin's own package, imported the way the plugin runtime makes it importable: with the plugin
    # directory on `sys.path` (plugin directories have hyphens, so they are not packages of this repo).
    sys.path.insert(0, str(HARNESS_PLUGIN_DIR))

stream_json: Any = importlib.import_module("langbot_harness_agent.stream_json")
ATTACHMENT_ID = "artifact-notes"
ATTACHMENT = b"release notes draft: faster deploys"
"""The one attachment the harness host holds; the bridge's `langbot_artifact_read` reads it."""
FAKE_CLI = REPO_ROOT / "tests" / "fakes" / "fake_harness_cli.py"
FAKE_COMMAND = f"{sys.executable} {FAKE_CLI} -p --output-format stream-json --verbose"


def harness_config(base: Path, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"command": FAKE_COMMAND, "working-directory": str(base), "timeout": 60}
    config.update(overrides)
    return config


@dataclass
class HarnessHost(ScriptedHost):
    transcript: list[dict[str, Any]] = field(default_factory=list)
    run_tokens: dict[str, str] = field(default_factory=dict)
    """run id → token, while the run is active."""
    refused: list[tuple[str, str]] = field(default_factory=list)

    def context(self, runner_id: str, text: str = "", **kwargs: Any) -> dict[str, Any]:
        ctx = super().context(runner_id, text, **kwargs)
        ctx["actor"]["actor_name"] = "Ada"
        ctx["resources"].update(
            {
                "history": {"page": True, "search": True, "event_get": True},
                "knowledge_bases": [{"kb_id": "kb-docs", "name": "Docs", "operations": ["retrieve"]}],
                "tools": [
                    {
                        "tool_name": "weather",
                        "description": "The weather of a city.",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                        "operations": ["detail", "call"],
                    }
                ],
            }
        )
        ctx["context"]["available_apis"].update({"history_page": True, "history_search": True, "event_get": True})
        ctx["context"]["has_history_before"] = True
        return ctx

    async def run_stream(self, runner_id: str, context: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        run_id = context["run_id"]
        token = secrets.token_urlsafe(16)
        self.run_tokens[run_id] = token
        request = {"runner_id": runner_id, "runner_name": "default", "context": context, "run_token": token}
        try:
            async for result in self.connection.stream("run_agent", request):
                if result.get("type") == "state.updated":
                    data = result["data"]
                    self.state[(self.run_conversations[run_id], data["scope"], data["key"])] = data["value"]
                yield result
        finally:
            self.run_tokens.pop(run_id, None)

    def handlers(self) -> dict[str, Any]:
        return {
            **super().handlers(),
            "history_page": self._history_page,
            "history_search": self._history_search,
            "event_get": self._event_get,
            "retrieve_knowledge_base": self._retrieve,
            "call_tool": self._call_tool,
            "artifact_read": self._artifact_read,
        }

    def _authorize(self, action: str, data: dict[str, Any]) -> None:
        run_id = data.get("run_id", "")
        if not run_id or self.run_tokens.get(run_id) != data.get("run_token"):
            self.refused.append((action, run_id))
            raise AgentAPIException.unauthorized("the run is not active", run_id=run_id)
        self.calls.append((action, data))

    def _items(self, conversation: str) -> list[TranscriptItem]:
        return [
            TranscriptItem(
                item_id=f"item-{i}",
                cursor=str(i + 1),
                conversation_id=conversation,
                role=item["role"],
                content=item["content"],
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
            for i, item in enumerate(self.transcript)
        ]

    async def _history_page(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("history_page", data)
        items = self._items(self.run_conversations[data["run_id"]])[-int(data.get("limit") or 20) :]
        return HistoryPage(items=items, has_more=False).model_dump(mode="json")

    async def _history_search(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("history_search", data)
        items = self._items(self.run_conversations[data["run_id"]])
        hits = [HistorySearchHit(item=item, score=1.0) for item in items if data["query"] in (item.content or "")]
        return HistorySearchResult(items=hits, query=data["query"]).model_dump(mode="json")

    async def _event_get(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("event_get", data)
        return AgentEventRecord(
            event_id=data["event_id"], event_type="message.received", source="api", time=datetime.now(UTC)
        ).model_dump(mode="json")

    async def _retrieve(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("retrieve_knowledge_base", data)
        if data["kb_id"] != "kb-docs":
            raise AgentAPIException.unauthorized(f"knowledge base {data['kb_id']!r} is not authorized")
        entry = KnowledgeEntry(id="chunk-1", content=f"Deploy with `make deploy` ({data['query_text']})", score=0.9)
        return RetrieveKnowledgeBaseResult(entries=[entry]).model_dump(mode="json")

    async def _artifact_read(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("artifact_read", data)
        if data["artifact_id"] != ATTACHMENT_ID:
            raise AgentAPIException.not_found(f"no artifact {data['artifact_id']!r} in this run's scope")
        offset = int(data.get("offset") or 0)
        piece = ATTACHMENT[offset : offset + int(data.get("length") or len(ATTACHMENT))]
        return ArtifactReadResult(
            artifact_id=ATTACHMENT_ID,
            offset=offset,
            length=len(piece),
            data_base64=base64.b64encode(piece).decode("ascii"),
            eof=offset + len(piece) >= len(ATTACHMENT),
            total_size=len(ATTACHMENT),
        ).model_dump(mode="json")

    async def _call_tool(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self._authorize("call_tool", data)
        city = data["parameters"].get("city")
        return CallToolResult(result={"city": city, "forecast": "sunny"}).model_dump(mode="json")


async def start_harness_host(cancel_grace: float = 5.0) -> tuple[HarnessHost, asyncio.Task[None]]:
    service = RuntimeService(load_plugins([PLUGINS_DIR]), cancel_grace=cancel_grace)
    host_end, runtime_end = memory_transport_pair()
    served = asyncio.create_task(service.serve(runtime_end, name="harness-host"))
    host = HarnessHost(connection=Connection(host_end, name="test-host"), service=service)
    for action, handler in host.handlers().items():
        host.connection.register(action, handler)
    await host.connection.start()
    return host, served


async def stop_harness_host(host: HarnessHost, served: asyncio.Task[None]) -> None:
    await host.connection.close()
    served.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served
