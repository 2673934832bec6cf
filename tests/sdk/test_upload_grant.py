"""Uploads follow the run context's `available_apis.artifact_upload`: without it the SDK refuses every
upload step inside the runtime and the fake host refuses an open sent past the SDK, as the host does."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.runner import AgentRunner
from langbot_sdk.testing import FakeHost, make_context


class Uploader(AgentRunner):
    """Uploads the input text and replies with the stored size, or the refusal's code."""

    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        try:
            meta = await api.artifacts.upload((ctx.input.text or "").encode(), name="note.txt")
        except AgentAPIException as exc:
            yield AgentRunResult.message_completed(ctx.run_id, f"refused:{exc.code}")
        else:
            yield AgentRunResult.message_completed(ctx.run_id, f"stored:{meta.size}")


async def test_an_upload_works_when_the_context_opens_uploads() -> None:
    host = FakeHost(make_context("hello"))

    outcome = await host.run(Uploader())

    assert outcome.text == "stored:5"
    assert [call.action for call in host.calls] == [
        "artifact_upload_open",
        "artifact_upload_chunk",
        "artifact_upload_finish",
    ]


async def test_without_the_grant_an_upload_is_refused_in_the_runtime() -> None:
    host = FakeHost(make_context("hello", uploads=False))

    outcome = await host.run(Uploader())

    assert outcome.text == "refused:unauthorized"
    assert host.calls == []


class StepUploader(AgentRunner):
    """Tries each upload step on its own and replies with the codes they failed with."""

    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        uploads = self.run_api(ctx).artifacts
        steps = {
            "open": lambda: uploads.upload_open("a.txt"),
            "chunk": lambda: uploads.upload_chunk("u1", 0, b"a"),
            "finish": lambda: uploads.upload_finish("u1", size=1, sha256=hashlib.sha256(b"a").hexdigest()),
            "abort": lambda: uploads.upload_abort("u1"),
        }
        codes = []
        for name, step in steps.items():
            try:
                await step()
            except AgentAPIException as exc:
                codes.append(f"{name}={exc.code}")
        yield AgentRunResult.message_completed(ctx.run_id, " ".join(codes))


async def test_without_the_grant_every_upload_step_is_refused_before_the_host() -> None:
    host = FakeHost(make_context("hello", uploads=False))

    outcome = await host.run(StepUploader())

    assert outcome.text == "open=unauthorized chunk=unauthorized finish=unauthorized abort=unauthorized"
    assert host.calls == []


async def test_the_fake_host_refuses_an_open_sent_without_the_grant() -> None:
    host = FakeHost(make_context("hello", uploads=False))

    with pytest.raises(AgentAPIException) as caught:
        await host.proxy_call("artifact_upload_open", {"name": "a.txt"})

    assert caught.value.code == "unauthorized"
    assert caught.value.error.details == {"api": "artifacts.upload"}
