"""Tools: what the model is offered, and running the calls of one model answer.

The offer is the run's authorized tools (`ctx.resources.tools`, already cut to the binding's allowed
names), narrowed by the config's `tools` when `enable-all-tools` is off; a tool that arrives without a
description or schema is described with `api.tools.get_detail`. Calls of one answer run concurrently or
one after another (`parallel-tool-calls`); either way the outcomes come back in the model's call order,
since the model matches results to calls by position as much as by id. A failing call — bad JSON
arguments, a refused or failing tool — becomes an error result the model reads, not a failed run.
Results longer than `max-tool-result-chars` are cut with a marker saying how much was left out.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langbot_local_agent.config import LocalAgentConfig
from langbot_sdk.protocol import AgentAPIException, AgentRunContext
from langbot_sdk.proxy import AgentRunAPIProxy

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


async def tool_specs(api: AgentRunAPIProxy, ctx: AgentRunContext, config: LocalAgentConfig) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    for tool in ctx.resources.tools:
        if not config.allows_tool(tool.tool_name) or (tool.operations and "call" not in tool.operations):
            continue
        description, parameters = tool.description or "", tool.parameters
        if not description and not parameters and (not tool.operations or "detail" in tool.operations):
            try:
                detail = await api.tools.get_detail(tool.tool_name)
            except AgentAPIException:
                pass
            else:
                description, parameters = detail.description or "", detail.parameters
        specs.append(ToolSpec(tool.tool_name, description, parameters or EMPTY_SCHEMA))
    return specs


def result_truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    return f"{text[:max_chars]}\n[… tool result truncated: {omitted} of {len(text)} characters omitted]"


def result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def arguments_parse(raw: str) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as an object, or the reason they are not one."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, "the arguments must be a JSON object"
    return value, None


@dataclass
class ToolCallPlan:
    call_id: str
    name: str
    arguments: dict[str, Any]
    argument_error: str | None = None


@dataclass
class ToolOutcome:
    plan: ToolCallPlan
    content: str
    """What the model reads (truncated)."""
    result: Any
    """What the `tool.call.completed` result carries: the result itself when short, else `content`."""
    error: str | None = None

    def tool_message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.plan.call_id, "content": self.content}


def tool_calls_plan(calls: Sequence[dict[str, Any]]) -> list[ToolCallPlan]:
    plans: list[ToolCallPlan] = []
    for call in calls:
        function = call.get("function") or {}
        arguments, error = arguments_parse(str(function.get("arguments") or ""))
        call_id = str(call.get("id") or "") or f"call_{uuid.uuid4().hex[:12]}"
        # The assistant message sent back must name the same id the tool message answers.
        call["id"] = call_id
        plans.append(ToolCallPlan(call_id, str(function.get("name") or ""), arguments, error))
    return plans


async def tool_execute(api: AgentRunAPIProxy, plan: ToolCallPlan, *, max_chars: int) -> ToolOutcome:
    if plan.argument_error is not None:
        message = f"Error: {plan.argument_error}"
        return ToolOutcome(plan, message, message, plan.argument_error)
    try:
        answer = await api.tools.call(plan.name, plan.arguments)
    except AgentAPIException as exc:
        error = f"{exc.error.code}: {exc.error.message}"
        return ToolOutcome(plan, f"Error: {error}", None, error)
    text = result_text(answer.result)
    content = result_truncate(text, max_chars)
    if answer.is_error:
        return ToolOutcome(plan, f"Error: {content}", None, content)
    return ToolOutcome(plan, content, answer.result if content == text else content)


async def tool_batch_execute(
    api: AgentRunAPIProxy, plans: Sequence[ToolCallPlan], *, parallel: bool, max_chars: int
) -> list[ToolOutcome]:
    """Outcomes in call order, whether the calls ran concurrently or one by one."""
    if parallel:
        return list(await asyncio.gather(*(tool_execute(api, p, max_chars=max_chars) for p in plans)))
    return [await tool_execute(api, p, max_chars=max_chars) for p in plans]
