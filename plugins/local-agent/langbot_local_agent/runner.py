"""`LocalAgentRunner`: one turn of the local agent, from the event to `run.completed`.

A turn: read the config → build the user message (multimodal input) → load the checkpoint → retrieve
knowledge → read the history → calibrate the token counter with the host → compact when the history does
not fit → assemble the context from fences → the model/tool loop (streamed with fallback) → the reply,
with usage, citations and what happened in `run.completed`'s metadata.

Ways a turn ends:
- `message.completed` then `run.completed` — an answer, or the clear message of the tool-iteration cap;
- `run.failed{code: local_agent.no_model}` — the config selects no model the run may use;
- `run.failed{code: local_agent.model_failed}` — every model of the chain failed before answering, or the
  model that was streaming failed after its first chunk (details name each failure);
- cancellation and the run deadline are the host's and the runtime's: nothing here catches them.

A turn that compacted the history also yields `state.updated` with the checkpoint it stored through
`api.state.set` (the same value), so the run's events — `GET /runs/{id}/events`, the debug chat's state
panel — show it; a proxy write alone leaves no run event.

Citations: a `message.completed` message has no metadata field in Protocol v1 (`ResultMessage` is
strict), so the citations travel in `run.completed.metadata.citations`, stored with the run's events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langbot_local_agent.budget import TokenCounter
from langbot_local_agent.config import DEFAULT_CONTEXT_WINDOW, LocalAgentConfig, config_parse
from langbot_local_agent.context import (
    ATTACHMENTS,
    KNOWLEDGE,
    LOCAL_AGENT_FENCES,
    MEMORY,
    NOTICE,
    SUMMARY,
    FenceInjection,
    context_assemble,
)
from langbot_local_agent.history import (
    CHECKPOINT_KEY,
    STATE_SCOPE,
    Checkpoint,
    checkpoint_load,
    checkpoint_save,
    compaction_split,
    history_read,
    item_message,
    state_usable,
    summary_request,
)
from langbot_local_agent.inputs import user_input_build
from langbot_local_agent.llm import ModelCallError, ModelReply, model_chain, model_invoke, model_stream, usage_add
from langbot_local_agent.memory import (
    MEMORY_KEY,
    memory_fence_content,
    memory_load,
    memory_update,
    memory_usable,
    memory_value,
)
from langbot_local_agent.rag import Retrieval, retrieve
from langbot_local_agent.tools import (
    ToolOutcome,
    ToolSpec,
    tool_batch_execute,
    tool_calls_plan,
    tool_execute,
    tool_specs,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult, ModelResource, StateScope
from langbot_sdk.proxy import AgentRunAPIProxy
from langbot_sdk.runner import AgentRunner

MIN_BUDGET_TOKENS = 256
ITERATION_SEPARATOR = "\n\n"
SUMMARY_INSTRUCTION_TOKENS = 128
LEFT_OUT_NOTICE = (
    "Earlier messages of this conversation are not included here. If the user refers to something you "
    "cannot see, say so instead of guessing."
)


def iteration_cap_message(rounds: int) -> str:
    return (
        f"I stopped after {rounds} rounds of tool calls, the limit set for this agent, without reaching a "
        "final answer. Ask again, or narrow the question, to let me continue."
    )


class DeltaCadence:
    """When `message.delta` results go out.

    `fragments`: every model fragment (the web chat); `cumulative`: for deliveries that edit one message
    as it grows — a chat platform's (`delivery.supports_edit`), or any whose
    `platform_capabilities.stream_mode` is `"cumulative"` — the text gathered over N chunks goes out as one
    delta, so the delivered text advances by a snapshot every N chunks while the deltas still concatenate
    to the reply (the host merges consecutive deltas by appending); `none`: the delivery does not stream,
    and only `message.completed` goes out. `stream_mode: "fragments"` keeps every fragment even where
    messages are edited.
    """

    def __init__(self, ctx: AgentRunContext, every: int) -> None:
        requested = ctx.delivery.platform_capabilities.get("stream_mode")
        if not ctx.delivery.supports_streaming:
            self.mode = "none"
        elif requested == "cumulative" or (requested != "fragments" and ctx.delivery.supports_edit):
            self.mode = "cumulative"
        else:
            self.mode = "fragments"
        self.every = max(1, every)
        self._pending: list[str] = []
        self._chunks = 0

    @property
    def streams(self) -> bool:
        return self.mode != "none"

    def push(self, text: str) -> str | None:
        """The delta to send for this fragment now, if any."""
        if self.mode == "fragments":
            return text
        self._pending.append(text)
        self._chunks += 1
        if self._chunks >= self.every:
            return self.flush()
        return None

    def flush(self) -> str | None:
        text = "".join(self._pending)
        self._pending, self._chunks = [], 0
        return text or None


@dataclass
class TurnReport:
    """What the turn did, for `run.completed.metadata` (monitoring and debugging)."""

    usage: dict[str, int] = field(default_factory=dict)
    models_used: list[str] = field(default_factory=list)
    model_failures: list[dict[str, Any]] = field(default_factory=list)
    tool_rounds: int = 0
    tool_calls: int = 0
    history: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    retrieval: dict[str, Any] = field(default_factory=dict)
    citations: list[dict[str, Any]] = field(default_factory=list)

    def metadata(self) -> dict[str, Any]:
        return {
            "models_used": self.models_used,
            "model_failures": self.model_failures,
            "tool_rounds": self.tool_rounds,
            "tool_calls": self.tool_calls,
            "history": self.history,
            "context": self.context,
            "retrieval": self.retrieval,
            "citations": self.citations,
        }


class LocalAgentRunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        turn = _Turn(ctx, self.run_api(ctx), config_parse(ctx.config))
        async for result in turn.run():
            yield result


class _Turn:
    def __init__(self, ctx: AgentRunContext, api: AgentRunAPIProxy, config: LocalAgentConfig) -> None:
        self.ctx = ctx
        self.api = api
        self.config = config
        self.report = TurnReport()
        self.counter = TokenCounter()
        self.chain = model_chain(ctx, config.model_chain)
        self.cadence = DeltaCadence(ctx, config.stream_snapshot_chunks)
        self.stored_checkpoint: Checkpoint | None = None
        """The checkpoint this turn stored (compaction), reported as `state.updated`."""
        self.stored_memory: dict[str, Any] | None = None
        """The person memory this turn changed, reported as `state.updated`."""

    def _failed(self, code: str, message: str, **details: Any) -> AgentRunResult:
        return AgentRunResult.run_failed(self.ctx.run_id, code, message, details=details)

    async def run(self) -> AsyncIterator[AgentRunResult]:
        ctx, config = self.ctx, self.config
        if not self.chain:
            wanted = list(config.model_chain)
            why = (
                "the config selects no model and the binding allows no chat model"
                if not wanted
                else "the binding allows none of the selected models"
            )
            yield self._failed("local_agent.no_model", f"local-agent has no model to call: {why}", selected=wanted)
            return
        primary = ctx.resources.find_model(self.chain[0])
        assert primary is not None
        messages = await self._context(primary)
        if self.stored_checkpoint is not None:
            value = self.stored_checkpoint.to_state()
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, CHECKPOINT_KEY, value)
        if self.stored_memory is not None:
            yield AgentRunResult.state_updated(ctx.run_id, StateScope.PERSON, MEMORY_KEY, self.stored_memory)
        tools = await self._tools(primary)
        try:
            async for result in self._loop(messages, tools):
                yield result
        except ModelCallError as exc:
            self.report.model_failures += [f.as_dict() for f in exc.failures]
            where = "after it started answering" if exc.after_first_chunk else "on every model of the chain"
            yield AgentRunResult.run_failed(
                ctx.run_id,
                "local_agent.model_failed",
                f"the model call failed {where}: {exc.last.code}: {exc.last.message}",
                retryable=exc.last.retryable,
                details={"failures": [f.as_dict() for f in exc.failures], "after_first_chunk": exc.after_first_chunk},
            )
            return
        yield AgentRunResult.run_completed(
            ctx.run_id, usage=dict(self.report.usage) or None, metadata=self.report.metadata()
        )

    # --- context --------------------------------------------------------------------------------------

    async def _context(self, primary: ModelResource) -> list[dict[str, Any]]:
        ctx, config, api = self.ctx, self.config, self.api
        window = config.context_window_tokens or primary.context_window or DEFAULT_CONTEXT_WINDOW
        budget = max(MIN_BUDGET_TOKENS, window - config.reserve_tokens)
        user = await user_input_build(api, ctx, vision=primary.supports_vision)
        checkpoint = await checkpoint_load(api, ctx)
        retrieval = await retrieve(api, ctx, config, user.text) if ctx.resources.knowledge_bases else Retrieval()
        self._note_retrieval(retrieval)

        injections: list[FenceInjection] = list(checkpoint.fences) if checkpoint else []
        if retrieval.chunks:
            injections.append(
                FenceInjection(KNOWLEDGE, retrieval.fence_content(), {"source": "knowledge-bases"}, ctx.run_id)
            )
        if memory_usable(ctx, config.person_memory):
            facts = await memory_load(api)
            updated = await memory_update(api, ctx, facts, ctx.input.text)
            if updated is not None:
                facts, self.stored_memory = updated, memory_value(updated)
            if facts:
                injections.append(
                    FenceInjection(MEMORY, memory_fence_content(facts), {"facts": str(len(facts))}, ctx.run_id)
                )
        if user.references:
            injections.append(FenceInjection(ATTACHMENTS, "\n".join(user.references), {}, ctx.run_id))
        system = [{"role": p.role, "content": p.content} for p in config.prompt]

        read = await history_read(api, ctx, checkpoint=checkpoint, limit=config.history_fetch_limit)
        pairs = [(item, message) for item in read.items if (message := item_message(item)) is not None]
        history = [message for _, message in pairs]
        await self.counter.calibrate(api, self.chain[0], [*system, *history, user.message])

        fixed = context_assemble(
            registry=LOCAL_AGENT_FENCES, system=system, history=[], current_user=user.message,
            injections=injections, turn=ctx.run_id, budget_tokens=budget, counter=self.counter,
        )  # fmt: skip
        history_budget = max(0, budget - fixed.tokens)
        split = compaction_split(
            [self.counter.message(m) for m in history],
            [m["role"] for m in history],
            budget=history_budget,
            keep_recent_tokens=config.keep_recent_tokens,
            max_round=config.max_round,
        )
        compacted = False
        left_out = 0
        if split:
            summary = await self._summarise(checkpoint, history[:split], window)
            left_out = split if summary is None else 0
            if summary is not None:
                new = Checkpoint(
                    cursor=pairs[split - 1][0].cursor,
                    fences=[FenceInjection(SUMMARY, summary, {"covers": "earlier conversation"}, ctx.run_id)],
                    summarized_items=(checkpoint.summarized_items if checkpoint else 0) + split,
                    run_id=ctx.run_id,
                )
                compacted = await checkpoint_save(api, ctx, new)
                self.stored_checkpoint = new if compacted else None
                injections = [i for i in injections if i.kind != SUMMARY] + new.fences
                checkpoint = new
            history = history[split:]
        if left_out or read.older_unread:
            injections.append(FenceInjection(NOTICE, LEFT_OUT_NOTICE, {}, ctx.run_id))

        assembled = context_assemble(
            registry=LOCAL_AGENT_FENCES, system=system, history=history, current_user=user.message,
            injections=injections, turn=ctx.run_id, budget_tokens=budget, counter=self.counter,
        )  # fmt: skip
        self.report.history = {
            "items_read": len(read.items),
            "pages": read.pages,
            "incremental": read.incremental,
            "older_unread": read.older_unread,
            "checkpoint_cursor": checkpoint.cursor if checkpoint else None,
            "compacted": compacted,
            "summarised_messages": split - left_out,
            "left_out_messages": left_out + assembled.dropped_history,
        }
        self.report.context = {
            "budget_tokens": budget,
            "tokens": assembled.tokens,
            "token_count": "host" if self.counter.host_counted else "local_estimate",
            "images": user.images,
            "attachment_references": len(user.references),
            "dropped_fences": assembled.dropped_fences,
            "truncated_fences": assembled.truncated_fences,
        }
        return assembled.messages

    async def _summarise(self, checkpoint: Checkpoint | None, older: list[dict[str, Any]], window: int) -> str | None:
        if not state_usable(self.ctx):
            return None
        config = self.config
        request = summary_request(
            checkpoint.summary if checkpoint else "",
            older,
            summary_tokens=config.summary_tokens,
            input_budget=max(MIN_BUDGET_TOKENS, window - config.summary_tokens - SUMMARY_INSTRUCTION_TOKENS),
            counter=self.counter,
        )
        try:
            reply = await model_invoke(self.api, self.chain, request, tools=None, timeout=config.timeout)
        except ModelCallError as exc:
            self.report.model_failures += [f.as_dict() for f in exc.failures]
            return None
        self._note_reply(reply)
        return reply.text.strip() or None

    def _note_retrieval(self, retrieval: Retrieval) -> None:
        self.report.citations = retrieval.citations()
        if self.ctx.resources.knowledge_bases:
            self.report.retrieval = {
                "chunks": len(retrieval.chunks),
                "reranked_by": retrieval.reranked_by,
                "errors": retrieval.errors,
            }

    def _note_reply(self, reply: ModelReply) -> None:
        usage_add(self.report.usage, reply.usage)
        self.report.models_used.append(reply.model_id)
        self.report.model_failures += [f.as_dict() for f in reply.failures]

    # --- the model / tool loop --------------------------------------------------------------------------

    async def _tools(self, primary: ModelResource) -> list[ToolSpec]:
        if not primary.supports_tools or self.config.max_tool_iterations <= 0 or not self.ctx.resources.tools:
            return []
        return await tool_specs(self.api, self.ctx, self.config)

    async def _loop(self, messages: list[dict[str, Any]], tools: list[ToolSpec]) -> AsyncIterator[AgentRunResult]:
        ctx, config = self.ctx, self.config
        offered = [t.openai() for t in tools] or None
        answer: list[str] = []
        while True:
            reply: ModelReply | None = None
            separated = not answer
            if self.cadence.streams:
                async for item in model_stream(self.api, self.chain, messages, tools=offered, timeout=config.timeout):
                    if isinstance(item, ModelReply):
                        reply = item
                        continue
                    if not separated:
                        item, separated = ITERATION_SEPARATOR + item, True
                    answer.append(item)
                    delta = self.cadence.push(item)
                    if delta:
                        yield AgentRunResult.message_delta(ctx.run_id, delta)
                if (delta := self.cadence.flush()) is not None:
                    yield AgentRunResult.message_delta(ctx.run_id, delta)
            else:
                reply = await model_invoke(self.api, self.chain, messages, tools=offered, timeout=config.timeout)
                if reply.text:
                    answer.append(reply.text if separated else ITERATION_SEPARATOR + reply.text)
            assert reply is not None
            self._note_reply(reply)
            if not reply.tool_calls:
                break
            if self.report.tool_rounds >= config.max_tool_iterations:
                notice = iteration_cap_message(self.report.tool_rounds)
                notice = notice if not answer else ITERATION_SEPARATOR + notice
                answer.append(notice)
                if self.cadence.streams:
                    yield AgentRunResult.message_delta(ctx.run_id, notice)
                break
            async for result in self._run_tools(messages, reply):
                yield result
        yield AgentRunResult.message_completed(ctx.run_id, "".join(answer))

    async def _run_tools(self, messages: list[dict[str, Any]], reply: ModelReply) -> AsyncIterator[AgentRunResult]:
        ctx, config = self.ctx, self.config
        plans = tool_calls_plan(reply.tool_calls)
        messages.append(reply.assistant_message())
        self.report.tool_rounds += 1
        self.report.tool_calls += len(plans)
        limit = config.max_tool_result_chars
        if config.parallel_tool_calls:
            for plan in plans:
                yield AgentRunResult.tool_call_started(ctx.run_id, plan.call_id, plan.name or "unknown", plan.arguments)
            outcomes = await tool_batch_execute(self.api, plans, parallel=True, max_chars=limit)
        else:
            outcomes = []
            for plan in plans:
                yield AgentRunResult.tool_call_started(ctx.run_id, plan.call_id, plan.name or "unknown", plan.arguments)
                outcome = await tool_execute(self.api, plan, max_chars=limit)
                outcomes.append(outcome)
                yield _completed(ctx.run_id, outcome)
        for outcome in outcomes:
            if config.parallel_tool_calls:
                yield _completed(ctx.run_id, outcome)
            messages.append(outcome.tool_message())


def _completed(run_id: str, outcome: ToolOutcome) -> AgentRunResult:
    name = outcome.plan.name or "unknown"
    return AgentRunResult.tool_call_completed(run_id, outcome.plan.call_id, name, outcome.result, error=outcome.error)
