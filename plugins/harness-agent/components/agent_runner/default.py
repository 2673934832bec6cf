"""The harness-agent runner: one run is one turn of a Claude Code-style coding CLI.

For each run:

1. The conversation's working directory — inside the configured base directory, created on its first turn
   and kept in conversation state (`external.working_directory`) for the next — receives the run's context
   projection (`langbot_harness_agent.projection`): `agent-context.json`, `LANGBOT_CONTEXT.md`, the skills of
   the runner config as `.claude/skills/<name>/SKILL.md`, and an MCP config (`.mcp.json`, also passed with
   `--mcp-config`) naming the run's host bridge.
2. The host bridge (`langbot_harness_agent.bridge.HostBridge`) listens on 127.0.0.1 for this run only, behind a
   random bearer token; its tools (current event, history page/search, knowledge retrieval, allowed tool
   calls) forward through this run's proxy API, so the host authorizes and audits each call. It stops when
   the run ends, so the token in the MCP config stops working.
3. The CLI runs in its own process group with the prompt on stdin (or as its last argument), `--resume
   <session id>` when the conversation has one (`external.session_id`, from the CLI's stream). Its
   stream-json lines become `message.delta` (when the reply surface streams), `tool.call.started/completed`,
   and `run.completed` with the usage normalized (`langbot_harness_agent.stream_json`).

Failures (`run.failed`): `harness.config_invalid` (naming the field), `harness.working_directory_missing`,
`harness.cli_not_found`, `harness.timeout` (retryable; the process group is killed), `harness.exit_error`
(non-zero exit; the stderr tail, secrets and the bridge token redacted), `harness.error` (the CLI reported
an error result), `harness.empty_output`. A cancelled run kills the process group and stops the bridge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langbot_harness_agent.bridge import BRIDGE_SERVER_NAME, HostBridge, bridge_tool_names
from langbot_harness_agent.process import HarnessProcess
from langbot_harness_agent.projection import (
    CONTEXT_FILE,
    MCP_CONFIG_FILE,
    Skill,
    agent_context,
    skill_name_valid,
    write_projection,
)
from langbot_harness_agent.stream_json import StreamJsonTranslator, harness_usage

from langbot_sdk.external import ExternalRunnerError, Platform, RunnerConfig, input_text
from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy
from langbot_sdk.runner import AgentRunner

logger = logging.getLogger(__name__)

STATE_SCOPE = "conversation"
SESSION_KEY = "external.session_id"
DIRECTORY_KEY = "external.working_directory"
DEFAULT_COMMAND = "claude -p --output-format stream-json --verbose"
DEFAULT_TIMEOUT = 600.0
PROMPT_MODES = ("stdin", "argument")
STDERR_MESSAGE_CHARS = 1500
NO_TEXT_PROMPT = "The current LangBot event has no text; see LANGBOT_CONTEXT.md for what it carries."
_DIR_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class HarnessSettings:
    command: list[str]
    base_directory: Path
    timeout: float
    prompt_mode: str
    mcp_config_arg: str
    resume_arg: str
    skills: list[Skill]
    env: dict[str, str]


def _json_value(config: dict[str, Any], name: str, default: Any) -> Any:
    """A `json` form field: the value itself, or JSON text of it (as some forms store it)."""
    value = config.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return _Invalid(value)
    return value


class _Invalid:
    def __init__(self, text: str) -> None:
        self.text = text


def read_settings(config: dict[str, Any], platform: Platform) -> HarnessSettings:
    reader = RunnerConfig(config, platform)
    try:
        command = shlex.split(reader.text("command", DEFAULT_COMMAND) or DEFAULT_COMMAND)
    except ValueError as exc:
        raise platform.config_invalid("command", f"cannot be split into arguments: {exc}") from None
    if not command:
        raise platform.config_invalid("command", "is required")
    args = _json_value(config, "args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise platform.config_invalid("args", "must be a JSON list of strings")
    env = _json_value(config, "env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str) for k, v in env.items()
    ):
        raise platform.config_invalid("env", "must be a JSON object of variable names to string values")
    for value in env.values():
        platform.add_secret(value)
    base = reader.required_text("working-directory")
    if not Path(base).is_absolute():
        raise platform.config_invalid("working-directory", "must be an absolute path")
    return HarnessSettings(
        command=command + args,
        base_directory=Path(base),
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
        prompt_mode=reader.choice("prompt-mode", PROMPT_MODES, "stdin"),
        mcp_config_arg=_option(config, "mcp-config-arg", "--mcp-config", platform),
        resume_arg=_option(config, "resume-arg", "--resume", platform),
        skills=_skills(config, platform),
        env=env,
    )


def _option(config: dict[str, Any], name: str, default: str, platform: Platform) -> str:
    """A CLI option name; an empty value (unlike a missing one) turns the option off."""
    value = config.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise platform.config_invalid(name, "must be a string")
    return value.strip()


def _skills(config: dict[str, Any], platform: Platform) -> list[Skill]:
    raw = _json_value(config, "skills", [])
    if not isinstance(raw, list):
        raise platform.config_invalid("skills", 'must be a JSON list of {"name", "description", "instructions"}')
    skills: dict[str, Skill] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise platform.config_invalid("skills", f"item {index} must be an object")
        name, description, instructions = item.get("name"), item.get("description", ""), item.get("instructions")
        if not isinstance(name, str) or not skill_name_valid(name):
            raise platform.config_invalid(
                "skills", f"item {index}: name must be lowercase letters, digits and hyphens (at most 64)"
            )
        if not isinstance(description, str) or not isinstance(instructions, str) or not instructions.strip():
            raise platform.config_invalid("skills", f"item {index}: description and instructions must be text")
        if name in skills:
            raise platform.config_invalid("skills", f"names the skill {name!r} twice")
        skills[name] = Skill(name, description, instructions)
    return list(skills.values())


class HarnessError(ExternalRunnerError):
    """A failure that also resets the conversation's resume state."""


@dataclass
class Resume:
    session_id: str | None = None
    working_directory: str | None = None


async def load_resume(api: AgentRunAPIProxy) -> Resume:
    resume = Resume()
    for key in (SESSION_KEY, DIRECTORY_KEY):
        try:
            stored = await api.state.get(STATE_SCOPE, key)
        except AgentAPIException as exc:
            # No state for this binding: every turn starts a new CLI session.
            logger.info("conversation state unavailable (%s); not resuming", exc.error.code)
            return Resume()
        if stored.found and isinstance(stored.value, str) and stored.value:
            setattr(resume, "session_id" if key == SESSION_KEY else "working_directory", stored.value)
    return resume


def working_directory(ctx: AgentRunContext, settings: HarnessSettings, resume: Resume, platform: Platform) -> Path:
    """The conversation's directory: the resumed one (which must still exist inside the base directory),
    else a new one."""
    base = settings.base_directory
    if not base.is_dir():
        raise platform.error(
            "working_directory_missing",
            f"the base directory {base} does not exist (runner config `working-directory`)",
            field="working-directory",
        )
    if resume.working_directory:
        directory = Path(resume.working_directory)
        inside = directory.resolve().is_relative_to(base.resolve())
        if not inside or not directory.is_dir():
            raise HarnessError(
                "harness.working_directory_missing",
                f"the conversation's working directory {directory} is gone; the next message starts a new session",
                details={"working_directory": str(directory)},
            )
        return directory
    conversation = ctx.context.conversation_id or (ctx.conversation.conversation_id if ctx.conversation else None)
    slug = _DIR_UNSAFE.sub("-", conversation or "run")[:48].strip("-.") or "run"
    directory = base / f"{slug}-{uuid.uuid4().hex[:8]}"
    directory.mkdir(mode=0o700)
    return directory


def _command_line(settings: HarnessSettings, mcp_config: Path, session_id: str | None, prompt: str) -> list[str]:
    argv = list(settings.command)
    if settings.mcp_config_arg:
        argv += [settings.mcp_config_arg, str(mcp_config)]
    if session_id and settings.resume_arg:
        argv += [settings.resume_arg, session_id]
    if settings.prompt_mode == "argument":
        argv.append(prompt)
    return argv


def _environment(settings: HarnessSettings, ctx: AgentRunContext, directory: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "LANGBOT_RUN_ID": ctx.run_id,
            "LANGBOT_WORKING_DIRECTORY": str(directory),
            "LANGBOT_CONTEXT_FILE": str(directory / CONTEXT_FILE),
            "LANGBOT_MCP_CONFIG": str(directory / MCP_CONFIG_FILE),
        }
    )
    env.update(settings.env)
    return env


def _prompt(ctx: AgentRunContext) -> str:
    return input_text(ctx).strip() or NO_TEXT_PROMPT


class HarnessAgentRunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        platform = Platform("harness", label="the coding CLI")
        api = self.run_api(ctx)
        try:
            settings = read_settings(ctx.config, platform)
            resume = await load_resume(api)
            directory = working_directory(ctx, settings, resume, platform)
        except HarnessError as exc:
            # Forget the vanished directory and its session: the next turn starts afresh.
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, SESSION_KEY, None)
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, DIRECTORY_KEY, None)
            yield exc.to_result(ctx.run_id)
            return
        except ExternalRunnerError as exc:
            yield exc.to_result(ctx.run_id)
            return
        if str(directory) != resume.working_directory:
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, DIRECTORY_KEY, str(directory))

        streams = ctx.delivery.supports_streaming
        async for result in self._turn(ctx, api, settings, platform, directory, resume):
            # A surface that cannot stream gets the reply once, as its message.completed.
            if streams or result.type != "message.delta":
                yield result

    async def _turn(
        self,
        ctx: AgentRunContext,
        api: AgentRunAPIProxy,
        settings: HarnessSettings,
        platform: Platform,
        directory: Path,
        resume: Resume,
    ) -> AsyncIterator[AgentRunResult]:
        translator = StreamJsonTranslator(ctx.run_id)
        stored_session = resume.session_id
        prompt = _prompt(ctx)
        try:
            async with HostBridge(ctx, api) as bridge:
                platform.add_secret(bridge.token)
                tools = bridge_tool_names(ctx)
                state = {SESSION_KEY: resume.session_id, DIRECTORY_KEY: str(directory)}
                document = agent_context(
                    ctx, state=state, skills=settings.skills, bridge_server=BRIDGE_SERVER_NAME, bridge_tools=tools
                )
                written = write_projection(
                    directory,
                    document,
                    skills=settings.skills,
                    mcp_servers={BRIDGE_SERVER_NAME: bridge.mcp_server_config()},
                )
                argv = _command_line(settings, written["mcp"], resume.session_id, prompt)
                process = HarnessProcess(
                    argv,
                    cwd=directory,
                    env=_environment(settings, ctx, directory),
                    stdin_text=prompt if settings.prompt_mode == "stdin" else None,
                )
                try:
                    async with asyncio.timeout(settings.timeout):
                        try:
                            await process.start()
                        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                            raise platform.error(
                                "cli_not_found",
                                f"cannot execute {settings.command[0]!r} ({type(exc).__name__}); "
                                "check the runner config `command`",
                                field="command",
                            ) from None
                        async with process:
                            async for line in process.lines():
                                for result in translator.feed(line):
                                    yield result
                                if translator.session_id and translator.session_id != stored_session:
                                    stored_session = translator.session_id
                                    yield AgentRunResult.state_updated(
                                        ctx.run_id, STATE_SCOPE, SESSION_KEY, stored_session
                                    )
                            exit_code = await process.wait()
                except TimeoutError:
                    raise platform.timeout(settings.timeout) from None
                stderr = process.stderr_text()
            for result in self._outcome(ctx, platform, translator, exit_code, stderr, bridge.calls):
                yield result
        except ExternalRunnerError as exc:
            yield exc.to_result(ctx.run_id)

    def _outcome(
        self,
        ctx: AgentRunContext,
        platform: Platform,
        translator: StreamJsonTranslator,
        exit_code: int,
        stderr: str,
        bridge_calls: list[str],
    ) -> list[AgentRunResult]:
        result = translator.result or {}
        if result.get("is_error") or (result.get("subtype") not in (None, "success")):
            detail = result.get("result") if isinstance(result.get("result"), str) else result.get("subtype")
            return [platform.stream_error(str(detail or "unknown error"), exit_code=exit_code).to_result(ctx.run_id)]
        if exit_code != 0:
            tail = platform.redact(stderr)[-STDERR_MESSAGE_CHARS:].strip()
            message = f"the coding CLI exited with status {exit_code}" + (f": {tail}" if tail else "")
            return [platform.error("exit_error", message, exit_code=exit_code).to_result(ctx.run_id)]
        text = translator.final_text()
        if not text:
            detail = "no stream-json lines" if translator.lines == 0 else "no assistant text"
            return [platform.empty_output(detail).to_result(ctx.run_id)]
        # The completed message is what the deltas streamed (or the result line's text when none did).
        return [
            AgentRunResult.message_completed(ctx.run_id, text),
            AgentRunResult.run_completed(
                ctx.run_id,
                usage=harness_usage(result, source="harness"),
                finish_reason="stop",
                metadata={"session_id": translator.session_id, "bridge_calls": bridge_calls},
            ),
        ]
