"""The LangBot runtime is opt-in and never required: a configured one that is down costs its runners nothing
but a failed refresh entry, and a run of one fails with a clear, retryable error."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bindings.models import RunnerDescriptor
from langbot_sdk.protocol import AgentAPIException
from runtimes.langbot import LangBotRuntime
from runtimes.langbot.catalog import langbot_runners_refresh
from tests.factories import RunnerDescriptorFactory


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"ws://127.0.0.1:{port}/control/ws"


@pytest.mark.django_db
def test_a_refresh_with_the_runtime_down_reports_it_and_keeps_its_runners(settings) -> None:
    settings.LANGBOT_LANGBOT_RUNTIME_URL = _closed_url()
    kept = RunnerDescriptorFactory.create(source=RunnerDescriptor.Source.LANGBOT, plugin_author="lbp")
    result = langbot_runners_refresh(settle=0)
    assert (result.available, result.missing) == ([], [])
    [error] = result.plugin_errors
    assert error["path"] == "langbot"
    assert "LangBot plugin runtime at ws://127.0.0.1:" in error["error"]
    kept.refresh_from_db()
    assert kept.status == RunnerDescriptor.Status.AVAILABLE


def test_a_run_with_the_runtime_down_fails_retryable() -> None:
    runtime = LangBotRuntime(_closed_url())
    request = {"runner_id": "plugin:lbp/echo/echo", "runner_name": "echo", "context": {"run_id": "r1"}}

    async def run() -> None:
        async with runtime.run_agent(request):
            pass

    with pytest.raises(AgentAPIException) as raised:
        asyncio.run(run())
    assert (raised.value.code, raised.value.retryable) == ("runtime_error", True)
