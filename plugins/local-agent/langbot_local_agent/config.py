"""The runner's binding config (`ctx.config`) read into one typed object.

Field names are LangBot's own `ai.local-agent` names where LangBot has the field (`model`, `max-round`,
`prompt`, `knowledge-bases`, `knowledge-base`, `rerank-model`, `rerank-top-k`, `tools`,
`enable-all-tools`, `box-session-id-template`) and kebab-case names of the same style for this runner's
own fields. The host validated the types against the manifest's form; this module still reads leniently
(a wrong or missing value falls back to the default, numbers are clamped to sane ranges) because a binding
stored unvalidated by a legacy import reaches the runner as it was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import limits

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
DEFAULT_CONTEXT_WINDOW = 8192
HISTORY_FETCH_LIMIT_MAX = 2000


@dataclass(frozen=True)
class PromptMessage:
    role: str
    content: str


@dataclass(frozen=True)
class LocalAgentConfig:
    model: str
    fallback_models: tuple[str, ...] = ()
    prompt: tuple[PromptMessage, ...] = (PromptMessage("system", DEFAULT_SYSTEM_PROMPT),)
    max_round: int = 10
    knowledge_bases: tuple[str, ...] = ()
    rerank_model: str = ""
    rerank_top_k: int = 5
    retrieval_top_k: int = 5
    enable_all_tools: bool = True
    tools: tuple[str, ...] = ()
    max_tool_iterations: int = 8
    parallel_tool_calls: bool = True
    max_tool_result_chars: int = 8000
    history_fetch_limit: int = 200
    context_window_tokens: int = 0
    reserve_tokens: int = 1024
    keep_recent_tokens: int = 2000
    summary_tokens: int = 512
    timeout: float = 120.0
    stream_snapshot_chunks: int = 8
    person_memory: bool = False
    """Keep what the user asks to remember in the `person` state scope (langbot_local_agent.memory)."""
    ignored: dict[str, Any] = field(default_factory=dict)
    """LangBot fields kept in the binding for a lossless import but not used here (reasoning levels,
    sandbox scope)."""

    @property
    def model_chain(self) -> tuple[str, ...]:
        """The primary model then the fallbacks, in order, without repeats or blanks."""
        return tuple(dict.fromkeys(m for m in (self.model, *self.fallback_models) if m))

    def allows_tool(self, name: str) -> bool:
        return self.enable_all_tools or name in self.tools


def _int(value: Any, default: int, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return default
    try:
        number = int(float(value))
    except ValueError:
        return default
    return max(low, min(number, high))


def _bool(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default


def _ids(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value.strip(),) if value.strip() else ()
    if isinstance(value, list):
        return tuple(dict.fromkeys(v.strip() for v in value if isinstance(v, str) and v.strip()))
    return ()


def _model_ids(value: Any) -> tuple[str, tuple[str, ...]]:
    """`model` as this runner stores it (an id) or as LangBot stores it (`{primary, fallbacks}`)."""
    if isinstance(value, dict):
        primary = value.get("primary")
        return (primary.strip() if isinstance(primary, str) else ""), _ids(value.get("fallbacks"))
    return (value.strip() if isinstance(value, str) else ""), ()


def _prompt(value: Any) -> tuple[PromptMessage, ...]:
    if isinstance(value, str):
        return (PromptMessage("system", value),) if value.strip() else ()
    if isinstance(value, list):
        messages = [
            PromptMessage(str(item.get("role") or "system"), item["content"])
            for item in value
            if isinstance(item, dict) and isinstance(item.get("content"), str) and item["content"].strip()
        ]
        return tuple(messages)
    return (PromptMessage("system", DEFAULT_SYSTEM_PROMPT),)


def config_parse(raw: dict[str, Any]) -> LocalAgentConfig:
    """Read `ctx.config`; never raises (a missing model is reported by the runner, not here)."""
    primary, legacy_fallbacks = _model_ids(raw.get("model"))
    fallbacks = tuple(m for m in dict.fromkeys((*legacy_fallbacks, *_ids(raw.get("fallback-models")))) if m != primary)
    kbs = _ids(raw.get("knowledge-bases")) or _ids(raw.get("knowledge-base"))
    return LocalAgentConfig(
        model=primary,
        fallback_models=fallbacks,
        prompt=_prompt(raw.get("prompt", [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}])),
        max_round=_int(raw.get("max-round"), 10, low=0, high=10_000),
        knowledge_bases=kbs,
        rerank_model=_ids(raw.get("rerank-model"))[0] if _ids(raw.get("rerank-model")) else "",
        rerank_top_k=_int(raw.get("rerank-top-k"), 5, low=1, high=limits.KNOWLEDGE_TOP_K_MAX),
        retrieval_top_k=_int(raw.get("retrieval-top-k"), 5, low=1, high=limits.KNOWLEDGE_TOP_K_MAX),
        enable_all_tools=_bool(raw.get("enable-all-tools"), True),
        tools=_ids(raw.get("tools")),
        max_tool_iterations=_int(raw.get("max-tool-iterations"), 8, low=0, high=100),
        parallel_tool_calls=_bool(raw.get("parallel-tool-calls"), True),
        max_tool_result_chars=_int(raw.get("max-tool-result-chars"), 8000, low=200, high=1_000_000),
        history_fetch_limit=_int(raw.get("history-fetch-limit"), 200, low=0, high=HISTORY_FETCH_LIMIT_MAX),
        context_window_tokens=_int(raw.get("context-window-tokens"), 0, low=0, high=10_000_000),
        reserve_tokens=_int(raw.get("reserve-tokens"), 1024, low=0, high=1_000_000),
        keep_recent_tokens=_int(raw.get("keep-recent-tokens"), 2000, low=0, high=1_000_000),
        summary_tokens=_int(raw.get("summary-tokens"), 512, low=64, high=100_000),
        timeout=float(_int(raw.get("timeout"), 120, low=1, high=3600)),
        stream_snapshot_chunks=_int(raw.get("stream-snapshot-chunks"), 8, low=1, high=1000),
        person_memory=_bool(raw.get("person-memory"), False),
        ignored={k: raw[k] for k in ("model-reasoning", "box-session-id-template") if k in raw},
    )
