"""Claude Code's ``--output-format stream-json`` output as runner results.

One JSON object per line:

* ``{"type": "system", "subtype": "init", "session_id": ...}`` — the session id to resume with;
* ``{"type": "assistant", "message": {"content": [{"type": "text", "text"}, {"type": "tool_use", "id",
  "name", "input"}]}}`` → ``message.delta`` for text, ``tool.call.started`` for each tool use;
* ``{"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id", "content",
  "is_error"}]}}`` → ``tool.call.completed``;
* ``{"type": "stream_event", "event": {"type": "content_block_delta", "delta": {"type": "text_delta",
  "text"}}}`` (``--include-partial-messages``) → ``message.delta``; the whole assistant message that follows
  then adds no text again;
* ``{"type": "result", "is_error", "result", "usage", "total_cost_usd", "num_turns", "duration_ms",
  "session_id"}`` — the end: the final text, the usage (normalized by ``usage``), or the harness's failure.

Lines that are not JSON objects, and unknown types, are skipped (the CLI may print other things).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import AgentRunResult

__all__ = ["StreamJsonTranslator", "harness_usage"]

TOOL_RESULT_MAX_CHARS = 8000


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def harness_usage(result: dict[str, Any], *, source: str) -> dict[str, Any] | None:
    """A ``result`` line's usage as ``run.completed`` usage: prompt tokens include cache reads and writes;
    the cost (USD), turns, duration and cache counts are kept beside them."""
    raw = result.get("usage")
    if not isinstance(raw, dict):
        return None
    fresh = _count(raw.get("input_tokens"))
    cache_read = _count(raw.get("cache_read_input_tokens"))
    cache_write = _count(raw.get("cache_creation_input_tokens"))
    completion = _count(raw.get("output_tokens"))
    prompt = fresh + cache_read + cache_write
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "source": source,
        "cache_read_tokens": cache_read,
        "cache_creation_tokens": cache_write,
    }
    cost = result.get("total_cost_usd", result.get("cost_usd"))
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        usage["total_price"] = float(cost)
        usage["currency"] = "USD"
    for key in ("num_turns", "duration_ms"):
        value = result.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            usage[key] = value
    return usage


def _tool_result_content(content: Any) -> Any:
    if isinstance(content, list):
        texts = [part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        content = "\n".join(texts) if len(texts) == len(content) else content
    if isinstance(content, str) and len(content) > TOOL_RESULT_MAX_CHARS:
        return content[:TOOL_RESULT_MAX_CHARS] + "…"
    return content


@dataclass
class StreamJsonTranslator:
    """Feed it the CLI's stdout lines; it returns the results each line makes and keeps what the run
    needs at the end (session id, text, the result line)."""

    run_id: str
    session_id: str | None = None
    text_parts: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    tool_names: dict[str, str] = field(default_factory=dict)
    open_tools: set[str] = field(default_factory=set)
    lines: int = 0
    _partial_text_seen: bool = False

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, line: str) -> list[AgentRunResult]:
        line = line.strip()
        if not line:
            return []
        try:
            item = json.loads(line)
        except ValueError:
            return []
        if not isinstance(item, dict):
            return []
        self.lines += 1
        session = item.get("session_id")
        if isinstance(session, str) and session:
            self.session_id = session
        kind = item.get("type")
        if kind == "assistant":
            return self._assistant(item.get("message") or {})
        if kind == "user":
            return self._user(item.get("message") or {})
        if kind == "stream_event":
            return self._partial(item.get("event") or {})
        if kind == "result":
            self.result = item
        return []

    def _delta(self, text: str) -> list[AgentRunResult]:
        if not text:
            return []
        self.text_parts.append(text)
        return [AgentRunResult.message_delta(self.run_id, text)]

    def _partial(self, event: dict[str, Any]) -> list[AgentRunResult]:
        delta = event.get("delta") if event.get("type") == "content_block_delta" else None
        if isinstance(delta, dict) and delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            results: list[AgentRunResult] = []
            if not self._partial_text_seen and self.text_parts and not self.text_parts[-1].endswith("\n"):
                results += self._delta("\n\n")  # a new message's text after an earlier one
            self._partial_text_seen = True
            return results + self._delta(delta["text"])
        return []

    def _assistant(self, message: dict[str, Any]) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        partial_seen, self._partial_text_seen = self._partial_text_seen, False
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str) and not partial_seen:
                if self.text_parts and not self.text_parts[-1].endswith("\n"):
                    results += self._delta("\n\n")  # separate the texts of consecutive assistant turns
                results += self._delta(block["text"])
            elif block.get("type") == "tool_use":
                call_id = str(block.get("id") or f"tool-{len(self.tool_names) + 1}")
                name = str(block.get("name") or "tool")
                self.tool_names[call_id] = name
                self.open_tools.add(call_id)
                arguments = block.get("input")
                results.append(
                    AgentRunResult.tool_call_started(
                        self.run_id, call_id, name, arguments if isinstance(arguments, dict) else {}
                    )
                )
        return results

    def _user(self, message: dict[str, Any]) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call_id = str(block.get("tool_use_id") or "")
            if call_id not in self.open_tools:
                continue
            self.open_tools.discard(call_id)
            value = _tool_result_content(block.get("content"))
            error = None
            if block.get("is_error"):
                error = value if isinstance(value, str) and value else "the tool failed"
            results.append(
                AgentRunResult.tool_call_completed(self.run_id, call_id, self.tool_names[call_id], value, error=error)
            )
        return results

    def final_text(self) -> str:
        """The answer: the streamed assistant text, else the result line's ``result``."""
        if self.text.strip():
            return self.text.strip()
        result = (self.result or {}).get("result")
        return result.strip() if isinstance(result, str) else ""
