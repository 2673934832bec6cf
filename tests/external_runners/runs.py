"""Running an external runner through the scripted host and reading what it answered: the scaffolding every
runner's tests share, and the assertions of the failures every runner reports the same way."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.external_runners.host import ScriptedHost, types_of
from tests.fakes.platform_http import FakePlatformServer, Upload

DISCONNECT_WAIT = 5.0  # seconds a test waits for a fake to see its client go
PICTURE = ("cat.png", "image/png", b"\x89PNG fake image bytes")
REPORT = ("report.pdf", "application/pdf", b"%PDF-1.4 " + b"x" * 10_000)


@dataclass(frozen=True)
class RunnerUnderTest:
    """One runner and the config that points it at a fake platform."""

    runner_id: str
    base_config: Callable[[Any], dict[str, Any]]
    """The fake → the runner config every test starts from."""

    def context(
        self,
        host: ScriptedHost,
        fake: Any,
        text: str = "hi",
        *,
        streaming: bool = True,
        config: dict[str, Any] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The run's context: `config` overrides the base config's fields, `streaming` says whether the reply
        surface streams, `options` go to `ScriptedHost.context`."""
        context = host.context(self.runner_id, text, config={**self.base_config(fake), **(config or {})}, **options)
        context["delivery"]["supports_streaming"] = streaming
        return context

    async def run(self, host: ScriptedHost, fake: Any, text: str = "hi", **options: Any) -> list[dict[str, Any]]:
        """Every result of one run (options as for `context`)."""
        return await host.run(self.runner_id, self.context(host, fake, text, **options))

    async def cancelled_after_first_delta(self, host: ScriptedHost, fake: Any) -> list[dict[str, Any]]:
        """The results of a run the host cancels once its first `message.delta` has arrived."""
        context = self.context(host, fake)
        results: list[dict[str, Any]] = []
        first_delta = asyncio.Event()

        async def consume() -> None:
            async for result in host.run_stream(self.runner_id, context):
                results.append(result)
                if result["type"] == "message.delta":
                    first_delta.set()

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(first_delta.wait(), 10)
        assert (await host.cancel(context["run_id"]))["cancelled"] is True
        await asyncio.wait_for(consumer, 10)
        return results


def picture_and_report(host: ScriptedHost) -> dict[str, Any]:
    """Input options for a run with two files the host holds: `PICTURE` as an image content part and
    `REPORT` as an attachment."""
    picture = host.add_artifact(*PICTURE)
    report = host.add_artifact(*REPORT)
    return {
        "attachments": [{"artifact_id": report, "name": REPORT[0], "mime_type": REPORT[1]}],
        "contents": [{"type": "image", "artifact_id": picture, "mime_type": PICTURE[1]}],
    }


def uploaded_whole(uploads: list[Upload]) -> dict[str, Upload]:
    """The platform's uploads by name, after checking that the picture and the report arrived whole and
    the picture typed as it was stored."""
    by_name = {upload.name: upload for upload in uploads}
    assert (by_name[PICTURE[0]].mime_type, by_name[PICTURE[0]].content) == PICTURE[1:]
    assert by_name[REPORT[0]].content == REPORT[2]
    return by_name


def completed_text(results: list[dict[str, Any]]) -> Any:
    """The content of the run's `message.completed`."""
    return next(r["data"]["message"]["content"] for r in results if r["type"] == "message.completed")


def reply(results: list[dict[str, Any]]) -> Any:
    """The message of a run that completed."""
    assert results[-1]["type"] == "run.completed", results
    return completed_text(results)


def deltas(results: list[dict[str, Any]]) -> list[str]:
    return [r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta"]


def failure(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The `run.failed` that ended the run (which answered no message)."""
    assert results[-1]["type"] == "run.failed", results
    assert "message.completed" not in types_of(results)
    data: dict[str, Any] = results[-1]["data"]
    return data


async def saw_client_go(fake: FakePlatformServer) -> bool:
    """Whether the fake saw the runner close the connection of its answer."""
    return await asyncio.to_thread(fake.disconnected.wait, DISCONNECT_WAIT)


async def assert_timed_out_and_closed(results: list[dict[str, Any]], platform: str, fake: FakePlatformServer) -> None:
    """The run failed with `<platform>.timeout`, retryable, and the platform saw the connection closed."""
    data = failure(results)
    assert (data["code"], data["retryable"]) == (f"{platform}.timeout", True)
    assert await saw_client_go(fake)


def assert_config_invalid(results: list[dict[str, Any]], platform: str, field: str, fake: FakePlatformServer) -> None:
    """The run failed with `<platform>.config_invalid` naming `field`, before any call of the platform."""
    data = failure(results)
    assert data["code"] == f"{platform}.config_invalid"
    assert data["details"] == {"field": field}
    assert data["retryable"] is False
    assert fake.requests == []


async def assert_cancelled_and_closed(results: list[dict[str, Any]], fake: FakePlatformServer) -> None:
    """The run relayed the first piece, ended `cancelled`, and the platform saw the connection closed."""
    assert results[-1]["type"] == "run.failed"
    assert results[-1]["data"]["code"] == "cancelled"
    assert await saw_client_go(fake)


def assert_empty_output(results: list[dict[str, Any]], platform: str) -> None:
    """An answer without text failed as `<platform>.empty_output` rather than sending an empty message."""
    assert failure(results)["code"] == f"{platform}.empty_output"


def log_everything(caplog: pytest.LogCaptureFixture) -> None:
    """Capture every log record (DEBUG up) of the host, the in-process runtime, the runner and httpx."""
    caplog.set_level(logging.DEBUG)


def assert_secret_nowhere(secret: str, results: list[dict[str, Any]], caplog: pytest.LogCaptureFixture) -> None:
    """Neither the run's results nor any record logged while it ran (see `log_everything`) shows `secret`."""
    assert secret not in json.dumps(results)
    assert caplog.records, "nothing was logged: the check would prove nothing"
    assert secret not in caplog.text
