"""`python -m langbot_sdk new <author>/<name>`: a new plugin directory the host discovers as it is.

What belongs here: the templates (`echo`, `llm`, `tools`) and `plugin_scaffold`, which writes one: the
plugin manifest, one AgentRunner component (`components/agent_runner/default.yaml` and `default.py`), a
README and a test that runs the runner on `langbot_sdk.testing`'s fake host.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from langbot_sdk.protocol import RunnerId

__all__ = ["TEMPLATES", "ScaffoldError", "plugin_scaffold"]


class ScaffoldError(Exception):
    """Why a plugin could not be scaffolded (bad name, directory not empty, unknown template)."""


_MANIFEST = """\
apiVersion: langbot/v1
kind: Plugin
metadata:
  author: $author
  name: $name
  version: 0.1.0
  label:
    en_US: $label
  description:
    en_US: $description
spec:
  components:
    AgentRunner:
      fromDirs:
        - path: components/agent_runner/
"""

_RUNNER_YAML = """\
apiVersion: langbot/v1
kind: AgentRunner
metadata:
  name: default
  label:
    en_US: $label
  description:
    en_US: $description
spec:
$spec
execution:
  python:
    path: default.py
    attr: $cls
"""

_ECHO_SPEC = """\
  config:
    - name: prefix
      type: string
      label:
        en_US: Prefix
      description:
        en_US: Text put before every reply.
      required: false
      default: ""
  capabilities:
    streaming: false
    event_context: true
  permissions: {}
"""

_ECHO_CODE = '''\
"""$label: replies with the message it received, after the configured prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langbot_sdk import AgentRunContext, AgentRunner, AgentRunResult


class $cls(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        prefix = str(ctx.config.get("prefix") or "")
        yield AgentRunResult.message_completed(ctx.run_id, prefix + (ctx.input.text or ""))
'''

_ECHO_TEST = '''\
"""The runner on the fake host of `langbot_sdk.testing`: no host, no database, no network."""

from __future__ import annotations

import asyncio
from pathlib import Path

from langbot_sdk.testing import FakeHost, load_runner, make_context

PLUGIN_DIR = Path(__file__).resolve().parents[1]


def test_it_replies_with_the_prefixed_message():
    runner = load_runner(PLUGIN_DIR)  # loaded as the host's runtime loads it
    host = FakeHost(make_context("hello", config={"prefix": "echo: "}))

    outcome = asyncio.run(host.run(runner))

    assert outcome.status == "completed"
    assert outcome.text == "echo: hello"
    assert host.calls == []  # it asked the host for nothing
'''

_LLM_SPEC = """\
  config:
    - name: model
      type: llm-model-selector
      label:
        en_US: Model
      description:
        en_US: The model that answers.
      required: true
    - name: prompt
      type: text
      label:
        en_US: System prompt
      required: false
      default: You are a helpful assistant.
    - name: history-messages
      type: integer
      label:
        en_US: History messages
      description:
        en_US: How many earlier messages of the conversation are sent with each question.
      required: false
      default: 10
  capabilities:
    streaming: true
    event_context: true
  permissions:
    models: [stream]
    history: [page]
  context:
    supports_history_pull: true
"""

_LLM_CODE = '''\
"""$label: answers with the configured model, streaming its reply, with the conversation's recent history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from langbot_sdk import AgentAPIException, AgentRunContext, AgentRunner, AgentRunResult


class $cls(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        model_id = ctx.config.get("model") or next((m.model_id for m in ctx.resources.models), None)
        if not model_id:
            yield AgentRunResult.run_failed(ctx.run_id, "runner.config", "no model is configured")
            return
        messages: list[dict[str, Any]] = [{"role": "system", "content": str(ctx.config.get("prompt") or "")}]
        limit = int(ctx.config.get("history-messages") or 0)
        if limit and ctx.context.available_apis.history_page and ctx.context.transcript_seq is not None:
            # Everything before the current input; the input itself is appended below.
            page = await api.history.page(before_cursor=str(ctx.context.transcript_seq), limit=limit)
            messages += [{"role": item.role, "content": item.content or ""} for item in page.items]
        messages.append({"role": "user", "content": ctx.input.text or ""})

        parts: list[str] = []
        try:
            async for chunk in api.models.stream(model_id, messages):
                text = chunk.delta.text()
                if text:
                    parts.append(text)
                    yield AgentRunResult.message_delta(ctx.run_id, text)
        except AgentAPIException as exc:
            yield AgentRunResult.run_failed(
                ctx.run_id, "runner.model_error", exc.error.message, retryable=exc.retryable
            )
            return
        yield AgentRunResult.message_completed(ctx.run_id, "".join(parts))
'''

_LLM_TEST = '''\
"""The runner on the fake host of `langbot_sdk.testing`: scripted model answers, seeded history."""

from __future__ import annotations

import asyncio
from pathlib import Path

from langbot_sdk.testing import FakeHost, load_runner, make_context

PLUGIN_DIR = Path(__file__).resolve().parents[1]


def test_it_streams_the_models_answer_with_the_history():
    runner = load_runner(PLUGIN_DIR)
    host = FakeHost(make_context("and now?", models=["gpt"], config={"model": "gpt", "history-messages": 10}))
    host.add_message("user", "hello")
    host.add_message("assistant", "hi!")
    host.models.stream("gpt", ["Still ", "here."])

    outcome = asyncio.run(host.run(runner))

    assert outcome.status == "completed"
    assert outcome.deltas == ["Still ", "here."]
    assert outcome.text == "Still here."
    sent = host.calls_of("invoke_llm_stream")[0].arguments["messages"]
    assert [m["content"] for m in sent[1:]] == ["hello", "hi!", "and now?"]


def test_a_model_failure_ends_the_run_with_its_message():
    runner = load_runner(PLUGIN_DIR)
    host = FakeHost(make_context("hi", models=["gpt"], config={"model": "gpt"}))
    host.models.fail("gpt", "rate_limited", "slow down")

    outcome = asyncio.run(host.run(runner))

    assert outcome.status == "runner.model_error"
    assert outcome.failure is not None and outcome.failure["retryable"] is True
'''

_TOOLS_SPEC = """\
  config:
    - name: model
      type: llm-model-selector
      label:
        en_US: Model
      description:
        en_US: The model that decides which tools to call and answers.
      required: true
    - name: max-rounds
      type: integer
      label:
        en_US: Tool rounds
      description:
        en_US: At most this many rounds of tool calls per message.
      required: false
      default: 5
  capabilities:
    streaming: false
    tool_calling: true
    event_context: true
  permissions:
    models: [invoke]
    tools: [detail, call]
"""

_TOOLS_CODE = '''\
"""$label: a tool loop. The model sees the run's tools; each round runs the calls it asks for and hands
the results back, until it answers in words or the round cap is reached."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from langbot_sdk import AgentAPIException, AgentRunContext, AgentRunner, AgentRunResult


class $cls(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        model_id = ctx.config.get("model") or next((m.model_id for m in ctx.resources.models), None)
        if not model_id:
            yield AgentRunResult.run_failed(ctx.run_id, "runner.config", "no model is configured")
            return
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.tool_name,
                    "description": tool.description or "",
                    "parameters": tool.parameters or {"type": "object", "properties": {}},
                },
            }
            for tool in ctx.resources.tools
        ]
        messages: list[dict[str, Any]] = [{"role": "user", "content": ctx.input.text or ""}]
        for _ in range(int(ctx.config.get("max-rounds") or 5)):
            answer = await api.models.invoke(model_id, messages, tools=tools or None)
            calls = answer.message.tool_calls or []
            if not calls:
                yield AgentRunResult.message_completed(ctx.run_id, answer.message.text())
                return
            messages.append(answer.message.model_dump(mode="json", exclude_none=True))
            for call in calls:
                name = call.function.name
                arguments = json.loads(call.function.arguments or "{}")
                yield AgentRunResult.tool_call_started(ctx.run_id, call.id, name, arguments)
                try:
                    result = (await api.tools.call(name, arguments)).result
                    error = None
                except AgentAPIException as exc:
                    # The model reads the refusal and can correct itself.
                    result, error = None, f"{exc.code}: {exc.error.message}"
                yield AgentRunResult.tool_call_completed(ctx.run_id, call.id, name, result, error=error)
                content = error or (result if isinstance(result, str) else json.dumps(result))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        yield AgentRunResult.message_completed(ctx.run_id, "I stopped after too many tool calls.")
'''

_TOOLS_TEST = '''\
"""The tool loop on the fake host of `langbot_sdk.testing`: scripted model turns and tool answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from langbot_sdk.testing import FakeHost, load_runner, make_context

PLUGIN_DIR = Path(__file__).resolve().parents[1]
CLOCK = {"tool_name": "clock", "description": "the time in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_it_calls_the_tool_the_model_asks_for_and_answers_with_its_result():
    runner = load_runner(PLUGIN_DIR)
    host = FakeHost(make_context("time in Paris?", models=["gpt"], tools=[CLOCK], config={"model": "gpt"}))
    host.tools.add("clock", lambda args: f"12:00 in {args['city']}", parameters=CLOCK["parameters"])
    host.models.reply("gpt", None, tool_calls=[{"id": "c1", "name": "clock", "arguments": {"city": "Paris"}}])
    host.models.reply("gpt", "It is noon in Paris.")

    outcome = asyncio.run(host.run(runner))

    assert outcome.text == "It is noon in Paris."
    assert outcome.types == ["tool.call.started", "tool.call.completed", "message.completed", "run.completed"]
    assert host.calls_of("call_tool")[0].arguments["parameters"] == {"city": "Paris"}
    second_turn = host.calls_of("invoke_llm")[1].arguments["messages"]
    assert second_turn[-1] == {"role": "tool", "tool_call_id": "c1", "content": "12:00 in Paris"}


def test_bad_arguments_are_refused_by_the_host_and_shown_to_the_model():
    runner = load_runner(PLUGIN_DIR)
    host = FakeHost(make_context("time?", models=["gpt"], tools=[CLOCK], config={"model": "gpt"}))
    host.tools.add("clock", "never called", parameters=CLOCK["parameters"])
    host.models.reply("gpt", None, tool_calls=[{"id": "c1", "name": "clock", "arguments": {}}])
    host.models.reply("gpt", "Which city?")

    outcome = asyncio.run(host.run(runner))

    assert host.calls_of("call_tool")[0].outcome == "invalid_argument"
    assert outcome.text == "Which city?"
'''

_README = """\
# $label

$description

A LangBot AgentRunner plugin (runner id `plugin:$author/$name/default`), made with
`python -m langbot_sdk new $author/$name --template $template`.

- `manifest.yaml`: the plugin; `components/agent_runner/default.yaml`: the runner's config form,
  capabilities and permissions; `components/agent_runner/default.py`: the runner.
- `tests/`: unit tests on the SDK's fake host. Run them with `pytest` from this directory.

Try it on a host: put this directory under one of the host's `LANGBOT_PLUGIN_DIRS` (or add its parent
directory to that variable) and restart the host's runtime; the runner appears in admin and can be bound
to a bot or the debug chat. See the SDK guide (`docs/` of the LangBot Host repository) for the context,
the host APIs, their caps and errors.
"""


TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    # name: (description, runner spec, runner code, test)
    "echo": ("Replies with the message it received.", _ECHO_SPEC, _ECHO_CODE, _ECHO_TEST),
    "llm": ("Answers with a model, streaming its reply.", _LLM_SPEC, _LLM_CODE, _LLM_TEST),
    "tools": ("Lets a model call the run's tools until it can answer.", _TOOLS_SPEC, _TOOLS_CODE, _TOOLS_TEST),
}


def _class_name(name: str) -> str:
    words = "".join(c if c.isalnum() else " " for c in name).split()
    base = "".join(w[:1].upper() + w[1:] for w in words) or "My"
    if base[0].isdigit():
        base = "Plugin" + base
    return base if base.endswith("Runner") else base + "Runner"


def plugin_scaffold(plugin: str, *, template: str = "echo", directory: Path | None = None) -> Path:
    """Write a new plugin `author/name` from `template` into `directory` (default `./<name>`); returns it."""
    try:
        runner_id = RunnerId.parse(f"plugin:{plugin}/default")
    except ValueError as exc:
        raise ScaffoldError(f"{plugin!r} is not a plugin name of the form <author>/<name>: {exc}") from None
    if template not in TEMPLATES:
        raise ScaffoldError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    target = (directory or Path.cwd() / runner_id.plugin).resolve()
    if target.exists() and any(target.iterdir()):
        raise ScaffoldError(f"{target} exists and is not empty")
    description, spec, code, test = TEMPLATES[template]
    values = {
        "author": runner_id.author,
        "name": runner_id.plugin,
        "label": runner_id.plugin.replace("-", " ").replace("_", " ").title(),
        "description": description,
        "template": template,
        "cls": _class_name(runner_id.plugin),
        "spec": spec.rstrip("\n"),
    }
    files = {
        "manifest.yaml": _MANIFEST,
        "components/agent_runner/default.yaml": _RUNNER_YAML,
        "components/agent_runner/default.py": code,
        "tests/test_default.py": test,
        "README.md": _README,
    }
    for relative, text in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values), encoding="utf-8")
    return target
