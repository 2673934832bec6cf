"""A scripted host for the external runners' tests: the real plugin runtime (`RuntimeService`, loading
`plugins/`) served in-process over the SDK's memory transport, and a host side that answers the runner's
state and artifact proxy calls with the SDK's own protocol models and keeps what `state.updated` results
store, as the real host does, so consecutive runs of one conversation see each other's state."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langbot_sdk.protocol import (
    AgentAPIException,
    ArtifactMetadata,
    ArtifactStreamChunk,
    StateGetResult,
    StateSetResult,
)
from langbot_sdk.runtime.loader import load_plugins
from langbot_sdk.runtime.service import RuntimeService
from langbot_sdk.wire import CallInfo, Connection
from langbot_sdk.wire.memory import memory_transport_pair

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DIR = REPO_ROOT / "plugins"
ARTIFACT_CHUNK = 4096


@dataclass
class StoredArtifact:
    name: str
    mime_type: str
    content: bytes


@dataclass
class ScriptedHost:
    """The host end of one in-process runtime connection."""

    connection: Connection
    service: RuntimeService
    state: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    """(conversation id, scope, key) → value."""
    artifacts: dict[str, StoredArtifact] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    run_conversations: dict[str, str] = field(default_factory=dict)

    def add_artifact(self, name: str, mime_type: str, content: bytes) -> str:
        artifact_id = f"art-{uuid.uuid4().hex[:8]}"
        self.artifacts[artifact_id] = StoredArtifact(name, mime_type, content)
        return artifact_id

    def context(
        self,
        runner_id: str,
        text: str = "",
        *,
        config: dict[str, Any],
        conversation_id: str = "langbot-conv-1",
        attachments: list[dict[str, Any]] | None = None,
        contents: list[dict[str, Any]] | None = None,
        deadline_at: float | None = None,
    ) -> dict[str, Any]:
        """An AgentRunContext as the host sends it, with state and artifact reads granted."""
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        self.run_conversations[run_id] = conversation_id
        return {
            "run_id": run_id,
            "trigger": {"type": "message.received", "source": "api"},
            "event": {
                "event_id": f"evt-{uuid.uuid4().hex[:8]}",
                "event_type": "message.received",
                "source": "api",
                "event_time": 1_700_000_000,
            },
            "conversation": {
                "conversation_id": conversation_id,
                "launcher_type": "person",
                "launcher_id": "u-42",
            },
            "actor": {"actor_type": "user", "actor_id": "u-42"},
            "input": {"text": text, "attachments": attachments or [], "contents": contents or []},
            "delivery": {"surface": "api", "supports_streaming": True},
            "resources": {"state": {"enabled": True, "scopes": ["conversation", "actor", "binding"]}},
            "context": {
                "conversation_id": conversation_id,
                "available_apis": {"state": True, "artifact_metadata": True, "artifact_read": True},
            },
            "runtime": {"trace_id": "trace-ext", "deadline_at": deadline_at},
            "config": config,
        }

    async def run(self, runner_id: str, context: dict[str, Any]) -> list[dict[str, Any]]:
        return [result async for result in self.run_stream(runner_id, context)]

    async def run_stream(self, runner_id: str, context: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        request = {"runner_id": runner_id, "runner_name": "default", "context": context}
        async for result in self.connection.stream("run_agent", request):
            if result.get("type") == "state.updated":
                data = result["data"]
                conversation = self.run_conversations[result["run_id"]]
                self.state[(conversation, data["scope"], data["key"])] = data["value"]
            yield result

    async def cancel(self, run_id: str) -> dict[str, Any]:
        return await self.connection.call("cancel_run", {"run_id": run_id, "reason": "user cancelled"})

    # -- proxy handlers ---------------------------------------------------------------------------

    def handlers(self) -> dict[str, Any]:
        return {
            "state_get": self._state_get,
            "state_set": self._state_set,
            "artifact_metadata": self._artifact_metadata,
            "artifact_stream": self._artifact_stream,
        }

    def _state_key(self, data: dict[str, Any]) -> tuple[str, str, str]:
        return (self.run_conversations[data["run_id"]], data["scope"], data["key"])

    async def _state_get(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self.calls.append(("state_get", data))
        key = self._state_key(data)
        return StateGetResult(found=key in self.state, value=self.state.get(key)).model_dump(mode="json")

    async def _state_set(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self.calls.append(("state_set", data))
        self.state[self._state_key(data)] = data["value"]
        return StateSetResult().model_dump(mode="json")

    def _artifact(self, artifact_id: str) -> StoredArtifact:
        artifact = self.artifacts.get(artifact_id)
        if artifact is None:
            raise AgentAPIException.not_found(f"no artifact {artifact_id}", artifact_id=artifact_id)
        return artifact

    async def _artifact_metadata(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        self.calls.append(("artifact_metadata", data))
        artifact = self._artifact(data["artifact_id"])
        return ArtifactMetadata(
            artifact_id=data["artifact_id"],
            name=artifact.name,
            mime_type=artifact.mime_type,
            size=len(artifact.content),
            created_at=datetime.now(UTC),
            source="upload",
        ).model_dump(mode="json")

    async def _artifact_stream(self, data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(("artifact_stream", data))
        content = self._artifact(data["artifact_id"]).content
        offset = int(data.get("offset") or 0)
        while True:
            piece = content[offset : offset + ARTIFACT_CHUNK]
            eof = offset + len(piece) >= len(content)
            yield ArtifactStreamChunk(
                artifact_id=data["artifact_id"],
                offset=offset,
                data_base64=base64.b64encode(piece).decode("ascii"),
                eof=eof,
            ).model_dump(mode="json")
            if eof:
                return
            offset += len(piece)


async def start_host(cancel_grace: float = 5.0) -> tuple[ScriptedHost, asyncio.Task[None]]:
    """A runtime serving the repository's plugins and the scripted host connected to it."""
    service = RuntimeService(load_plugins([PLUGINS_DIR]), cancel_grace=cancel_grace)
    host_end, runtime_end = memory_transport_pair()
    served = asyncio.create_task(service.serve(runtime_end, name="scripted-host"))
    host = ScriptedHost(connection=Connection(host_end, name="test-host"), service=service)
    for action, handler in host.handlers().items():
        host.connection.register(action, handler)
    await host.connection.start()
    return host, served


def types_of(results: list[dict[str, Any]]) -> list[str]:
    return [result["type"] for result in results]
