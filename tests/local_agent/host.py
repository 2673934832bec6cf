"""A scripted in-process host for driving the local-agent runner: a `HostChannel` that answers the proxy
actions the runner uses from scripted data and records every call.

Every request is validated with the SDK's own strict request model (`PROXY_REQUEST_MODELS`), and every
answer goes back through the SDK proxy, which parses it with the protocol's result models — so a shape
the real host would refuse, or could not send, fails the test.

Scripting:
- `script_stream(model_id, *chunks)`: one `invoke_llm_stream` answer; `chunks` are `text(...)`, `tool_call(...)`,
  `usage(...)` frames, or an `AgentAPIException` (raised at that point: first = before any chunk);
- `script_reply(model_id, result_or_exception)`: one `invoke_llm` answer;
- `tools[name]`: an async function of the parameters returning the result, or raising;
- `kb[kb_id]`: the entries `retrieve_knowledge_base` returns (or an exception); `rerank`: a function;
- `transcript`: the conversation's items, oldest first (cursor = str(position)), paged as the host does;
- `state`: the conversation state; `count_tokens`: a function of the request, or None (→ not_found).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from langbot_sdk.protocol import PROXY_REQUEST_MODELS, Action, AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import bind_run_channel, unbind_run_channel

Script = list[dict[str, Any] | AgentAPIException]


def text(content: str) -> dict[str, Any]:
    return {"delta": {"role": "assistant", "content": content}}


def tool_call(index: int, *, id: str = "", name: str = "", arguments: str = "") -> dict[str, Any]:
    call = {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"delta": {"role": "assistant", "content": None, "tool_calls": [call]}}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "delta": {"role": "assistant", "content": ""},
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "finish_reason": "stop",
    }


def hang(seconds: float) -> dict[str, Any]:
    """A pause in a scripted stream (a provider that stops sending)."""
    return {"hang": seconds}


def transcript_item(position: int, role: str, content: str, *, event_id: str | None = None) -> dict[str, Any]:
    return {
        "item_id": f"item-{position}",
        "cursor": str(position),
        "conversation_id": "conv-1",
        "role": role,
        "content": content,
        "event_id": event_id or f"evt-{position}",
        "created_at": datetime(2024, 1, 1, tzinfo=UTC).isoformat(),
    }


class ScriptedHost:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.streams: dict[str, deque[Script]] = defaultdict(deque)
        self.replies: dict[str, deque[dict[str, Any] | AgentAPIException]] = defaultdict(deque)
        self.tools: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {}
        self.tool_details: dict[str, dict[str, Any]] = {}
        self.kb: dict[str, list[dict[str, Any]] | AgentAPIException] = {}
        self.rerank: Callable[[str, list[str], int | None], list[dict[str, Any]]] | None = None
        self.transcript: list[dict[str, Any]] = []
        self.state: dict[str, Any] = {}
        self.count_tokens: Callable[[dict[str, Any]], int] | None = None
        self.running_tools = 0
        self.most_tools_at_once = 0

    # -- scripting -----------------------------------------------------------------------------------

    def script_stream(self, model_id: str, *frames: dict[str, Any] | AgentAPIException) -> None:
        self.streams[model_id].append(list(frames))

    def script_reply(self, model_id: str, answer: dict[str, Any] | AgentAPIException) -> None:
        self.replies[model_id].append(answer)

    def actions(self, action: str) -> list[dict[str, Any]]:
        return [data for name, data in self.calls if name == action]

    # -- HostChannel -----------------------------------------------------------------------------------

    def _record(self, action: str, data: dict[str, Any]) -> None:
        PROXY_REQUEST_MODELS[Action(action)].model_validate(data)
        self.calls.append((action, data))

    async def call(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self._record(action, data)
        handler = getattr(self, f"_on_{action}", None)
        if handler is None:
            raise AgentAPIException.not_found(f"{action} is not scripted")
        answer: dict[str, Any] = await handler(data)
        return answer

    def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        return self._stream(action, data)

    async def _stream(self, action: str, data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        self._record(action, data)
        if action != Action.INVOKE_LLM_STREAM.value:
            raise AgentAPIException.not_found(f"{action} is not scripted")
        queue = self.streams.get(data["model_id"])
        if not queue:
            raise AgentAPIException.runtime_error(f"no stream scripted for {data['model_id']}")
        for frame in queue.popleft():
            if isinstance(frame, AgentAPIException):
                raise frame
            if "hang" in frame:
                await asyncio.sleep(frame["hang"])
                continue
            yield frame

    # -- handlers ----------------------------------------------------------------------------------------

    async def _on_invoke_llm(self, data: dict[str, Any]) -> dict[str, Any]:
        queue = self.replies.get(data["model_id"])
        if not queue:
            raise AgentAPIException.runtime_error(f"no reply scripted for {data['model_id']}")
        answer = queue.popleft()
        if isinstance(answer, AgentAPIException):
            raise answer
        return answer

    async def _on_count_tokens(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.count_tokens is None:
            raise AgentAPIException.not_found("count_tokens is not available")
        return {"tokens": self.count_tokens(data)}

    async def _on_get_tool_detail(self, data: dict[str, Any]) -> dict[str, Any]:
        return self.tool_details[data["tool_name"]]

    async def _on_call_tool(self, data: dict[str, Any]) -> dict[str, Any]:
        function = self.tools.get(data["tool_name"])
        if function is None:
            raise AgentAPIException.not_found(f"tool {data['tool_name']!r} does not exist")
        self.running_tools += 1
        self.most_tools_at_once = max(self.most_tools_at_once, self.running_tools)
        try:
            return {"result": await function(data["parameters"]), "is_error": False}
        finally:
            self.running_tools -= 1

    async def _on_retrieve_knowledge_base(self, data: dict[str, Any]) -> dict[str, Any]:
        entries = self.kb.get(data["kb_id"], [])
        if isinstance(entries, AgentAPIException):
            raise entries
        return {"entries": entries[: data["top_k"]]}

    async def _on_invoke_rerank(self, data: dict[str, Any]) -> dict[str, Any]:
        assert self.rerank is not None
        return {"results": self.rerank(data["query"], data["documents"], data.get("top_k"))}

    async def _on_state_get(self, data: dict[str, Any]) -> dict[str, Any]:
        found = data["key"] in self.state
        return {"scope": data["scope"], "key": data["key"], "found": found, "value": self.state.get(data["key"])}

    async def _on_state_set(self, data: dict[str, Any]) -> dict[str, Any]:
        self.state[data["key"]] = data["value"]
        return {"scope": data["scope"], "key": data["key"]}

    async def _on_history_page(self, data: dict[str, Any]) -> dict[str, Any]:
        """Paged as the host pages: items oldest first, cursors exclusive, `next_cursor` in the direction."""
        items, limit = self.transcript, data["limit"]
        positions = [int(item["cursor"]) for item in items]
        if data["direction"] == "forward":
            after = int(data["after_cursor"]) if data.get("after_cursor") else -1
            newer = [i for i, p in enumerate(positions) if p > after]
            page = newer[:limit]
            more = len(newer) > limit
            next_cursor = items[page[-1]]["cursor"] if page and more else None
        else:
            before = int(data["before_cursor"]) if data.get("before_cursor") else None
            older = [i for i, p in enumerate(positions) if before is None or p < before]
            page = older[-limit:]
            more = len(older) > limit
            next_cursor = items[page[0]]["cursor"] if page and more else None
        return {"items": [items[i] for i in page], "next_cursor": next_cursor, "has_more": more}


def build_context(
    text: str = "hello",
    *,
    config: dict[str, Any] | None = None,
    models: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    kbs: list[str] | None = None,
    state: bool = True,
    streaming: bool = True,
    edits: bool = False,
    platform_capabilities: dict[str, Any] | None = None,
    transcript_seq: int | None = None,
    latest_cursor: str | None = None,
    contents: list[dict[str, Any]] | None = None,
    attachments: list[dict[str, Any]] | None = None,
    run_id: str = "run-1",
    event_id: str = "evt-current",
) -> AgentRunContext:
    """A run context as the host builds it for a local-agent binding."""
    all_ops = ["invoke", "stream", "rerank"]
    return AgentRunContext.model_validate(
        {
            "run_id": run_id,
            "trigger": {"type": "message.received", "source": "api"},
            "event": {"event_id": event_id, "event_type": "message.received", "source": "api"},
            "conversation": {"conversation_id": "conv-1"},
            "input": {"text": text, "contents": contents or [], "attachments": attachments or []},
            "delivery": {
                "surface": "webui",
                "supports_streaming": streaming,
                "supports_edit": edits,
                "platform_capabilities": platform_capabilities or {},
            },
            "resources": {
                "models": models
                if models is not None
                else [{"model_id": "m1", "kind": "llm", "operations": all_ops, "supports_tools": True}],
                "tools": [{"operations": ["detail", "call"], **t} for t in tools or []],
                "knowledge_bases": [{"kb_id": kb, "name": kb.upper(), "operations": ["retrieve"]} for kb in kbs or []],
                "state": {"enabled": state, "scopes": ["conversation"] if state else []},
                "history": {"page": True},
            },
            "context": {
                "conversation_id": "conv-1",
                "latest_cursor": latest_cursor,
                "transcript_seq": transcript_seq,
                "available_apis": {"history_page": True, "state": state, "artifact_read": True},
            },
            "runtime": {"trace_id": "trace-1"},
            "config": {"model": "m1", **(config or {})},
        }
    )


async def drive(runner: Any, ctx: AgentRunContext, host: ScriptedHost) -> list[AgentRunResult]:
    """Run the runner against `host`, as the plugin runtime does; every result is checked by its model."""
    bind_run_channel(ctx.run_id, host)
    try:
        results = [AgentRunResult.coerce(r) async for r in runner.run(ctx)]
    finally:
        unbind_run_channel(ctx.run_id, host)
    assert results, "the runner yielded nothing"
    assert results[-1].is_terminal, results
    return results


def of_type(results: list[AgentRunResult], type_: str) -> list[dict[str, Any]]:
    return [r.data for r in results if r.type == type_]


async def slow(value: Any, seconds: float = 0.05) -> Any:
    await asyncio.sleep(seconds)
    return value
