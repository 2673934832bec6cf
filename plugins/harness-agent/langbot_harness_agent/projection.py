"""The files an external harness reads in its working directory (plugins/harness-agent/README.md).

* ``agent-context.json``: schema ``langbot.agent_runner.external_harness_context.v1`` — the run id, the
  current event, actor, subject, conversation refs, the input, delivery, the resources authorized for this
  run (ids and descriptions only, never host objects or secrets), the context handles (cursors and which
  context APIs are open), the state pointers (``external.session_id``, ``external.working_directory``),
  runtime facts, the skills projected and the MCP bridge (server name and tools — the token lives only in
  the MCP config file);
* ``LANGBOT_CONTEXT.md``: the same, readable;
* skills: ``.claude/skills/<name>/SKILL.md`` (front matter ``name`` and ``description``, then the body);
* the MCP config: ``{"mcpServers": {...}}``, the bridge's entry included, written owner-only (0600).

Every file is rewritten on each turn, so a resumed working directory always describes the current run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langbot_sdk.protocol import AgentRunContext

__all__ = [
    "CONTEXT_FILE",
    "CONTEXT_MARKDOWN_FILE",
    "CONTEXT_SCHEMA",
    "MCP_CONFIG_FILE",
    "Skill",
    "agent_context",
    "context_markdown",
    "skill_name_valid",
    "write_projection",
]

CONTEXT_SCHEMA = "langbot.agent_runner.external_harness_context.v1"
CONTEXT_FILE = "agent-context.json"
CONTEXT_MARKDOWN_FILE = "LANGBOT_CONTEXT.md"
MCP_CONFIG_FILE = ".mcp.json"
SKILLS_DIR = Path(".claude") / "skills"
_SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


@dataclass(frozen=True)
class Skill:
    """One skill to project: a name (lowercase letters, digits, hyphens), a description and its body."""

    name: str
    description: str
    instructions: str


def skill_name_valid(name: str) -> bool:
    """Whether ``name`` is a safe skill directory name (no path separators, no dots)."""
    return bool(_SKILL_NAME.match(name))


def _dump(model: Any) -> Any:
    return None if model is None else model.model_dump(mode="json", exclude_none=True)


def agent_context(
    ctx: AgentRunContext,
    *,
    state: Mapping[str, Any],
    skills: Sequence[Skill] = (),
    bridge_server: str | None = None,
    bridge_tools: Iterable[str] = (),
    mcp_config_file: str = MCP_CONFIG_FILE,
) -> dict[str, Any]:
    """The ``agent-context.json`` document of this run."""
    resources = ctx.resources
    return {
        "schema": CONTEXT_SCHEMA,
        "run_id": ctx.run_id,
        "trigger": _dump(ctx.trigger),
        "event": _dump(ctx.event),
        "actor": _dump(ctx.actor),
        "subject": _dump(ctx.subject),
        "conversation": _dump(ctx.conversation),
        "input": _dump(ctx.input),
        "delivery": _dump(ctx.delivery),
        "resources": {
            "models": [_dump(m) for m in resources.models],
            "tools": [_dump(t) for t in resources.tools],
            "knowledge_bases": [_dump(kb) for kb in resources.knowledge_bases],
            "artifacts": [_dump(a) for a in resources.artifacts],
            "state": _dump(resources.state),
            "storage": _dump(resources.storage),
            "history": _dump(resources.history),
            "skills": [{"name": s.name, "description": s.description} for s in skills],
        },
        "context": {
            **_dump(ctx.context),
            "available_context_apis": sorted(
                name for name, allowed in ctx.context.available_apis.model_dump().items() if allowed
            ),
        },
        "state": dict(state),
        "runtime": {
            "host": ctx.runtime.host,
            "trace_id": ctx.runtime.trace_id,
            "deadline_at": ctx.runtime.deadline_at,
            "locale": ctx.runtime.locale,
            "timezone": ctx.runtime.timezone,
        },
        "mcp": {
            "config_file": mcp_config_file,
            "bridge": (
                {"server": bridge_server, "tools": list(bridge_tools), "auth": "bearer token in the MCP config"}
                if bridge_server
                else None
            ),
        },
    }


def context_markdown(document: Mapping[str, Any]) -> str:
    """``LANGBOT_CONTEXT.md``: a readable summary of an ``agent-context.json`` document."""
    event = document.get("event") or {}
    actor = document.get("actor") or {}
    conversation = document.get("conversation") or {}
    user_input = document.get("input") or {}
    resources = document.get("resources") or {}
    context = document.get("context") or {}
    mcp = document.get("mcp") or {}
    bridge = mcp.get("bridge") or {}
    lines = [
        "# LangBot context",
        "",
        f"This directory belongs to a LangBot run (`{document.get('run_id')}`). The full, structured context "
        f"is in `{CONTEXT_FILE}` (schema `{document.get('schema')}`).",
        "",
        "## Current event",
        "",
        f"- type: `{event.get('event_type')}` from `{event.get('source')}` (event id `{event.get('event_id')}`)",
        f"- actor: {actor.get('actor_name') or actor.get('actor_id') or 'unknown'} ({actor.get('actor_type', '-')})",
        f"- conversation: `{conversation.get('conversation_id')}`"
        + (f", thread `{conversation['thread_id']}`" if conversation.get("thread_id") else ""),
        "",
        "## Input",
        "",
    ]
    text = user_input.get("text") or ""
    lines += ["```text", text, "```"] if text else ["(no text)"]
    attachments = user_input.get("attachments") or []
    if attachments:
        lines += ["", "Attachments (artifact ids; read them with the `langbot_artifact_read` tool):"]
        lines += [
            f"- `{a.get('artifact_id')}` {a.get('name') or ''} {a.get('mime_type') or ''}".rstrip() for a in attachments
        ]
    lines += ["", "## Authorized resources", ""]
    kbs = resources.get("knowledge_bases") or []
    tools = resources.get("tools") or []
    skills = resources.get("skills") or []
    lines.append(
        "- knowledge bases: " + (", ".join(f"`{kb['kb_id']}` ({kb.get('name') or ''})" for kb in kbs) or "none")
    )
    lines.append("- tools: " + (", ".join(f"`{t['tool_name']}`" for t in tools) or "none"))
    lines.append("- skills: " + (", ".join(f"`{s['name']}`" for s in skills) or "none"))
    apis = context.get("available_context_apis") or []
    lines += ["", "## Context APIs", "", "- open to this run: " + (", ".join(f"`{a}`" for a in apis) or "none")]
    if context.get("has_history_before"):
        lines.append("- the conversation has earlier messages: page them with the bridge's history tool")
    if bridge:
        lines += [
            "",
            "## Host bridge (MCP)",
            "",
            f"The MCP server `{bridge.get('server')}` (configured in `{mcp.get('config_file')}`) answers for this "
            "run only and stops when it ends. Tools: " + ", ".join(f"`{t}`" for t in bridge.get("tools") or []) + ".",
        ]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if private:
        # Created owner-only before any byte is written: the file holds the bridge's bearer token.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def write_projection(
    directory: Path,
    document: Mapping[str, Any],
    *,
    skills: Sequence[Skill] = (),
    mcp_servers: Mapping[str, Any] | None = None,
    mcp_config_file: str = MCP_CONFIG_FILE,
) -> dict[str, Path]:
    """Write the projection into ``directory``; returns the paths written by kind."""
    written: dict[str, Path] = {}
    written["context"] = directory / CONTEXT_FILE
    _write(written["context"], json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    written["markdown"] = directory / CONTEXT_MARKDOWN_FILE
    _write(written["markdown"], context_markdown(document))
    for skill in skills:
        if not skill_name_valid(skill.name):
            raise ValueError(f"invalid skill name {skill.name!r}")
        description = " ".join(skill.description.split())
        body = f"---\nname: {skill.name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n\n"
        path = directory / SKILLS_DIR / skill.name / "SKILL.md"
        _write(path, body + skill.instructions.rstrip() + "\n")
        written[f"skill:{skill.name}"] = path
    if mcp_servers is not None:
        written["mcp"] = directory / mcp_config_file
        _write(written["mcp"], json.dumps({"mcpServers": dict(mcp_servers)}, indent=2) + "\n", private=True)
    return written
