"""A Runner written against LangBot's released plugin SDK (langbot-plugin), as its authors write them.

Commands in the input text:
- `sleep`: stream one chunk, then wait (until the host cancels the run);
- `peek actor`: also read actor-scoped state (which the test's binding does not enable);
- `ask <question>`: stream the answer of the binding's first model (a host model call);
- `store <key> <value>`: write plugin storage and read it back;
- `version`: ask the host for LangBot's version, which this host does not provide;
- anything else is echoed back, word by word, after the turn counter kept in conversation state.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class EchoRunner(Runner):
    async def run(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        text = ctx.input.to_text()
        greeting = ctx.config.get("greeting") or "echo"
        if text == "sleep":
            yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content="sleeping"))
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                await ctx.api.state_set("conversation", "cancelled", True)
                raise
            return
        if text.startswith("ask "):
            # A model call streamed through the host's model handlers, the binding's first model.
            model_id = ctx.resources.models[0].model_id
            parts = []
            async for chunk in ctx.api.invoke_llm_stream(model_id, [Message(role="user", content=text[4:])]):
                if chunk.content:
                    parts.append(str(chunk.content))
                    yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content=chunk.content))
            answer = "".join(parts)
            yield RunnerResult.run_completed(ctx.run_id, message=Message(role="assistant", content=answer))
            return
        if text.startswith("store "):
            # Plugin storage inside a run: the host's storage handlers, the binding's storage areas.
            key, _, value = text[6:].partition(" ")
            await self.plugin.set_plugin_storage(key, value.encode())
            back = (await self.plugin.get_plugin_storage(key)).decode()
            yield RunnerResult.run_completed(ctx.run_id, message=Message(role="assistant", content=f"stored {back}"))
            return
        if text == "version":
            # A LangBot host API with no equivalent on this host: refused with a message naming it.
            try:
                version = await self.plugin.get_langbot_version()
                reply = f"version {version}"
            except Exception as exc:
                reply = f"refused: {exc}"
            yield RunnerResult.run_completed(ctx.run_id, message=Message(role="assistant", content=reply))
            return
        got = await ctx.api.state_get("conversation", "turns")
        turns = int(got.get("value") or 0) + 1
        await ctx.api.state_set("conversation", "turns", turns)
        page = await ctx.api.history_page(limit=10)
        notes = [f"turn {turns}", f"history {len(page.items)}"]
        if text == "peek actor":
            try:
                await ctx.api.state_get("actor", "mood")
                notes.append("actor allowed")
            except Exception as exc:  # the host refuses a scope the binding does not enable
                # lbp rt relays a host error to the plugin as host.action_error, the host's code in its message.
                notes.append("actor refused" + (" (unauthorized)" if "unauthorized" in str(exc) else f" ({exc})"))
        reply = f"{greeting}: {text} ({', '.join(notes)})"
        for word in reply.split(" "):
            yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content=word + " "))
        yield RunnerResult.run_completed(ctx.run_id, message=Message(role="assistant", content=reply))
