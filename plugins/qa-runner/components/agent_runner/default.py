"""The qa-runner's only runner: deterministic behaviours for tests, benchmarks and debugging.

Behaviour comes from the binding config (`behaviour`) or a `qa:<behaviour>[:<n>] ` prefix on the input
text, the prefix winning. See the plugin README for what each behaviour does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import channel_for_run
from langbot_sdk.runner import AgentRunner

BEHAVIOURS = frozenset(
    {
        "ok", "stream", "type", "tools", "empty", "malformed", "fail", "slow", "raise", "echo_context", "state",
        "proxy", "artifact", "nul", "upload", "announce", "steer",
    }
)  # fmt: skip
# `type` writes this reply word by word at about TYPE_SECONDS in all, so a person sees it grow.
TYPE_TEXT = (
    "Hello! This reply is typed a word at a time, the way a model streams its answer, so that you can watch "
    "it grow in the chat before the run completes."
)
TYPE_SECONDS = 3.0
STATE_KEY = "qa.counter"
STREAMING_ACTIONS = frozenset({"artifact_stream", "invoke_llm_stream"})
SUMMARY_TEXT_CHARS = 200
# `upload` makes a PNG of this many MiB unless its argument says otherwise, a MiB at a time.
UPLOAD_DEFAULT_MIB = 1.0
MIB = 1024 * 1024
# `steer` listens this long (seconds) for messages handed to the run while it runs, unless told otherwise.
STEER_DEFAULT_SECONDS = 3.0
PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
# What the `proxy` tour uploads.
PROXY_UPLOAD = b"QA_UPLOAD\n"


class QARunnerError(RuntimeError):
    """Raised on purpose by the `raise` behaviour."""


def parse_input(text: str, config: dict[str, Any]) -> tuple[str, str | None, str]:
    """Split the input into (behaviour, prefix argument, remaining text); the config is the fallback."""
    behaviour = str(config.get("behaviour") or "ok")
    argument: str | None = None
    if text.startswith("qa:"):
        head, _, rest = text.partition(" ")
        name, _, argument_part = head[3:].partition(":")
        if name in BEHAVIOURS:
            return name, argument_part or None, rest
    return behaviour, argument, text


def _number(argument: str | None, configured: Any, default: float) -> float:
    for candidate in (argument, configured):
        if candidate is None:
            continue
        try:
            return float(candidate)
        except (TypeError, ValueError):
            continue
    return default


class QARunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult | dict[str, Any]]:
        behaviour, argument, text = parse_input(ctx.input.text or "", ctx.config)
        if behaviour == "ok":
            yield AgentRunResult.message_completed(ctx.run_id, f"QA_OK:{text}")
        elif behaviour == "stream":
            count = max(0, int(_number(argument, ctx.config.get("delta_count"), 5)))
            parts = [f"chunk{i} " for i in range(count)]
            for part in parts:
                yield AgentRunResult.message_delta(ctx.run_id, part)
            yield AgentRunResult.message_completed(ctx.run_id, "".join(parts))
        elif behaviour == "type":
            async for result in self._type(ctx, text, _number(argument, None, TYPE_SECONDS)):
                yield result
        elif behaviour == "tools":
            async for result in self._tools(ctx, text):
                yield result
        elif behaviour == "empty":
            pass
        elif behaviour == "malformed":
            yield {"type": "message.completed", "data": {"message": 42}}
        elif behaviour == "nul":
            # Text PostgreSQL cannot store: the host must still keep the reply.
            yield AgentRunResult.message_delta(ctx.run_id, "QA_NUL:\x00")
            yield AgentRunResult.message_completed(ctx.run_id, f"QA_NUL:\x00{text}")
        elif behaviour == "fail":
            yield AgentRunResult.run_failed(
                ctx.run_id, code="runner.error", message="qa-runner failed on purpose", retryable=False
            )
            return
        elif behaviour == "slow":
            await asyncio.sleep(_number(argument, ctx.config.get("sleep_seconds"), 5))
            yield AgentRunResult.message_completed(ctx.run_id, f"QA_SLOW:{text}")
        elif behaviour == "steer":
            async for result in self._steer(ctx, text, _number(argument, None, STEER_DEFAULT_SECONDS)):
                yield result
        elif behaviour == "raise":
            raise QARunnerError("qa-runner raised on purpose")
        elif behaviour == "echo_context":
            yield AgentRunResult.message_completed(ctx.run_id, ctx.model_dump_json())
        elif behaviour == "state":
            async for result in self._bump_counter(ctx):
                yield result
        elif behaviour == "artifact":
            content = f"QA_ARTIFACT:{text}".encode()
            yield AgentRunResult.artifact_created(ctx.run_id, "qa-artifact.txt", "text/plain", content=content)
            yield AgentRunResult.message_completed(ctx.run_id, f"QA_ARTIFACT:{len(content)}")
        elif behaviour == "upload":
            async for result in self._upload(ctx, _number(argument, ctx.config.get("upload_mib"), UPLOAD_DEFAULT_MIB)):
                yield result
        elif behaviour == "announce":
            # Names an artifact the runner did not make (the argument or the text): the host decides if it is shown.
            artifact_id = argument or text.strip()
            yield AgentRunResult.artifact_created(ctx.run_id, "announced.bin", artifact_id=artifact_id)
            yield AgentRunResult.message_completed(ctx.run_id, f"QA_ANNOUNCE:{artifact_id}")
        elif behaviour == "proxy":
            raw_calls = ctx.config.get("proxy_calls")
            if isinstance(raw_calls, list) and raw_calls:
                report = await self._raw_calls(ctx, raw_calls)
            else:
                report = await self._exercise_proxy(ctx)
            yield AgentRunResult.message_completed(ctx.run_id, json.dumps(report, sort_keys=True))
        yield AgentRunResult.run_completed(ctx.run_id)

    async def _type(self, ctx: AgentRunContext, text: str, seconds: float) -> AsyncIterator[AgentRunResult]:
        words = (f"{TYPE_TEXT} You said: {text}" if text else TYPE_TEXT).split(" ")
        pause = max(0.0, seconds) / len(words)
        parts = [word if i == 0 else f" {word}" for i, word in enumerate(words)]
        for part in parts:
            yield AgentRunResult.message_delta(ctx.run_id, part)
            await asyncio.sleep(pause)
        yield AgentRunResult.message_completed(ctx.run_id, "".join(parts))

    async def _steer(self, ctx: AgentRunContext, text: str, seconds: float) -> AsyncIterator[AgentRunResult]:
        """Listen `seconds` for messages steered into this run (the runner declares `steering`), saying
        each one as it comes, then answer with the input and every steered text in order."""
        api = self.run_api(ctx)
        texts = [text]
        loop = asyncio.get_running_loop()
        until = loop.time() + max(0.0, seconds)
        while (remaining := until - loop.time()) > 0:
            item = await api.inputs.next(timeout=remaining)
            if item is None:
                break
            texts.append(item.input.text or "")
            yield AgentRunResult.message_delta(ctx.run_id, f"[got: {item.input.text or ''}] ")
        # What came in the last instant is still this run's to answer.
        texts += [item.input.text or "" for item in api.inputs.pending()]
        yield AgentRunResult.message_completed(ctx.run_id, "QA_STEER:" + " + ".join(texts))

    async def _tools(self, ctx: AgentRunContext, text: str) -> AsyncIterator[AgentRunResult]:
        """A pretend tool call around the reply (no tool is really called): `tool.call.started`, a pause,
        `tool.call.completed` with a result made from the input, then the reply."""
        call_id = f"qa-tool-{ctx.run_id[:8]}"
        parameters = {"query": text or "the weather"}
        yield AgentRunResult.tool_call_started(ctx.run_id, call_id, "qa_lookup", parameters)
        await asyncio.sleep(0.5)
        result = {"answer": f"QA_TOOL:{text}", "source": "qa-runner"}
        yield AgentRunResult.tool_call_completed(ctx.run_id, call_id, "qa_lookup", result)
        yield AgentRunResult.message_completed(ctx.run_id, f"The qa_lookup tool answered QA_TOOL:{text}")

    async def _upload(self, ctx: AgentRunContext, mib: float) -> AsyncIterator[AgentRunResult]:
        """Upload a generated PNG of `mib` MiB through `api.artifacts.upload`, made and sent a MiB at a time
        (the runner never holds the whole image), then announce it by id."""
        size = max(len(PNG_HEAD), int(mib * MIB))
        digest = hashlib.sha256()

        async def image() -> AsyncIterator[bytes]:
            sent = 0
            while sent < size:
                piece = _image_piece(sent, min(MIB, size - sent))
                digest.update(piece)
                sent += len(piece)
                yield piece

        api = self.run_api(ctx)
        meta = await api.artifacts.upload(image(), name="qa-image.png", mime_type="image/png", size=size)
        yield AgentRunResult.artifact_created(
            ctx.run_id, meta.name, meta.mime_type, artifact_id=meta.artifact_id, size=meta.size, sha256=meta.sha256
        )
        yield AgentRunResult.message_completed(
            ctx.run_id, f"QA_UPLOAD:{meta.artifact_id}:{meta.size}:{digest.hexdigest()}:{meta.mime_type}"
        )

    async def _bump_counter(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        current = await api.state.get("conversation", STATE_KEY)
        value = (current.value if current.found and isinstance(current.value, int) else 0) + 1
        await api.state.set("conversation", STATE_KEY, value)
        stored = (await api.state.get("conversation", STATE_KEY)).value
        yield AgentRunResult.state_updated(ctx.run_id, scope="conversation", key=STATE_KEY, value=stored)
        yield AgentRunResult.message_completed(ctx.run_id, f"QA_STATE:{stored}")

    async def _exercise_proxy(self, ctx: AgentRunContext) -> dict[str, dict[str, Any]]:
        api = self.run_api(ctx)
        res = ctx.resources
        model_id = res.models[0].model_id if res.models else "qa-missing-model"
        tool_name = res.tools[0].tool_name if res.tools else "qa-missing-tool"
        kb_id = res.knowledge_bases[0].kb_id if res.knowledge_bases else "qa-missing-kb"
        area = "plugin"
        messages = [{"role": "user", "content": "ping"}]

        async def drain_model_stream() -> Any:
            return [chunk async for chunk in api.models.stream(model_id, messages)]

        async def drain_artifact_stream() -> Any:
            return [chunk async for chunk in api.artifacts.open_stream("qa-artifact")]

        # One tiny upload taken step by step (open, one chunk, finish), each step its own report entry; an
        # upload that was never opened goes on with a made-up id, so a refused open does not hide the rest.
        upload_ids: list[str] = []

        async def upload_open() -> Any:
            opened = await api.artifacts.upload_open("qa-upload.txt", mime_type="text/plain", size=len(PROXY_UPLOAD))
            upload_ids.append(opened.upload_id)

        def upload_id() -> str:
            return upload_ids[0] if upload_ids else "qa-missing-upload"

        async def upload_abandoned() -> Any:
            # A second upload, opened then aborted, so the abort is exercised on an upload of its own.
            opened = await api.artifacts.upload_open("qa-abandoned.txt", mime_type="text/plain")
            return await api.artifacts.upload_abort(opened.upload_id)

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "models.invoke": lambda: api.models.invoke(model_id, messages),
            "models.stream": drain_model_stream,
            "models.rerank": lambda: api.models.rerank(model_id, "ping", ["a", "b"]),
            "models.count_tokens": lambda: api.models.count_tokens(model_id, messages),
            "tools.get_detail": lambda: api.tools.get_detail(tool_name),
            "tools.call": lambda: api.tools.call(tool_name, {}),
            "knowledge.retrieve": lambda: api.knowledge.retrieve(kb_id, "ping", top_k=1),
            "history.page": lambda: api.history.page(limit=1),
            "history.search": lambda: api.history.search("ping", top_k=1),
            "events.get": lambda: api.events.get(ctx.event.event_id),
            "events.page": lambda: api.events.page(limit=1),
            "artifacts.metadata": lambda: api.artifacts.metadata("qa-artifact"),
            "artifacts.read_range": lambda: api.artifacts.read_range("qa-artifact", 0, 16),
            "artifacts.open_stream": drain_artifact_stream,
            "artifacts.upload_open": upload_open,
            "artifacts.upload_chunk": lambda: api.artifacts.upload_chunk(upload_id(), 0, PROXY_UPLOAD),
            "artifacts.upload_finish": lambda: api.artifacts.upload_finish(
                upload_id(), size=len(PROXY_UPLOAD), sha256=hashlib.sha256(PROXY_UPLOAD).hexdigest()
            ),
            "artifacts.upload_abort": upload_abandoned,
            "state.get": lambda: api.state.get("conversation", "qa.proxy"),
            "state.set": lambda: api.state.set("conversation", "qa.proxy", True),
            "state.delete": lambda: api.state.delete("conversation", "qa.proxy"),
            "state.list": lambda: api.state.list("conversation"),
            "storage.get": lambda: api.storage.get(area, "qa.proxy"),
            "storage.set": lambda: api.storage.set(area, "qa.proxy", b"qa"),
            "storage.delete": lambda: api.storage.delete(area, "qa.proxy"),
            "storage.list": lambda: api.storage.list(area),
            "platform.request_action": lambda: api.platform.request_action(
                "message.reaction", {"message_id": "qa"}, {"reaction": "ok"}
            ),
        }
        report: dict[str, dict[str, Any]] = {}
        for name, call in calls.items():
            try:
                await call()
            except AgentAPIException as exc:
                report[name] = {"ok": False, "code": exc.error.code}
            else:
                report[name] = {"ok": True, "code": None}
        return report

    async def _raw_calls(self, ctx: AgentRunContext, calls: list[Any]) -> dict[str, dict[str, Any]]:
        """Send each `{"name", "action", "data"}` to the host unchecked and report the answers, so a test
        sees what the host (not the SDK) decides. Long strings in answers are reported by length only."""
        channel = channel_for_run(ctx.run_id)
        report: dict[str, dict[str, Any]] = {}
        for index, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            name = str(call.get("name") or f"call{index}")
            action = str(call.get("action") or "")
            data = {"run_id": ctx.run_id, **_expand(call.get("data") if isinstance(call.get("data"), dict) else {})}
            try:
                if channel is None:
                    raise RuntimeError("no host channel for this run")
                if action in STREAMING_ACTIONS:
                    chunks = [chunk async for chunk in channel.stream(action, data, timeout=60)]
                    result: Any = {"chunks": len(chunks), "items": [_summary(c) for c in chunks[:3]]}
                else:
                    result = _summary(await channel.call(action, data, timeout=60))
            except AgentAPIException as exc:
                report[name] = {"ok": False, "code": exc.error.code, "details": _summary(exc.error.details)}
            else:
                report[name] = {"ok": True, "code": None, "result": result}
        return report


def _image_piece(offset: int, length: int) -> bytes:
    """Bytes `offset..offset+length` of the `upload` image: the PNG signature, then a repeating pattern."""
    pattern = bytes(range(256)) * (length // 256 + 2)
    piece = bytearray(pattern[offset % 256 : offset % 256 + length])
    if offset < len(PNG_HEAD):
        head = PNG_HEAD[offset : offset + length]
        piece[: len(head)] = head
    return bytes(piece)


def _expand(value: Any) -> Any:
    """Placeholders that keep large test payloads out of the binding config: `{"$text": n}` becomes n
    characters, `{"$base64_bytes": n}` the base64 of n zero bytes."""
    if isinstance(value, dict):
        if set(value) == {"$text"} and isinstance(value["$text"], int):
            return "x" * value["$text"]
        if set(value) == {"$base64_bytes"} and isinstance(value["$base64_bytes"], int):
            return base64.b64encode(bytes(value["$base64_bytes"])).decode("ascii")
        return {key: _expand(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand(item) for item in value]
    return value


def _summary(value: Any) -> Any:
    if isinstance(value, str) and len(value) > SUMMARY_TEXT_CHARS:
        return {"text_length": len(value)}
    if isinstance(value, dict):
        return {key: _summary(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_summary(item) for item in value[:100]]
    return value
