"""The host's runtime link survives the death of the plugin runtime: a stdio runtime is spawned again
without waiting for a call, a call made while the runtime is away waits for it, and the health probe
says at once that it is away."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable

import pytest

from langbot_sdk.protocol import Action, AgentAPIException, ErrorCode
from runtimes.link import RuntimeLink, runtime_link


def _wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_killed_stdio_runtime_is_spawned_again_by_itself(runtime_plugins, settings):
    runtime_plugins(*settings.LANGBOT_PLUGIN_DIRS)
    link = runtime_link()
    assert link.call_sync(Action.PING, {}) is not None
    first = link._child
    assert first is not None

    os.kill(first.pid, signal.SIGKILL)

    # Nobody calls: the link notices the drop and respawns the runtime on its own.
    _wait_for(lambda: link._child is not first and link._connection is not None and not link._connection.closed)
    assert link.call_sync(Action.PING, {}, connect_wait=0) is not None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_runtime_that_does_not_answer_fails_retryable_after_the_wait_and_at_once_without():
    link = RuntimeLink(url=f"ws://127.0.0.1:{_closed_port()}", token="t", plugin_dirs=[], call_timeout=2,
                       reconnect_wait=0.8)  # fmt: skip
    try:
        started = time.monotonic()
        with pytest.raises(AgentAPIException) as waited:
            link.call_sync(Action.PING, {})
        assert time.monotonic() - started >= 0.7
        assert waited.value.error.code == ErrorCode.RUNTIME_ERROR
        assert waited.value.error.retryable

        started = time.monotonic()
        with pytest.raises(AgentAPIException):
            link.call_sync(Action.PING, {}, connect_wait=0)
        assert time.monotonic() - started < 0.5
    finally:
        link.close()
