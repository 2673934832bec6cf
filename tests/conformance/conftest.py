"""Conformance against the protocol's proxy calls, errors and run isolation (docs/protocol.md) through the real plugin
runtime and a real Celery worker: the qa-runner's `proxy` behaviour sends the wire calls a test names (`proxy_calls`),
unchecked by the SDK, and replies what the host answered. The worker is the session's (`tests/processes.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.processes import post_message, wait_terminal


@pytest.fixture
def probe(worker, qa_binding) -> Callable[..., dict[str, Any]]:
    """Run the qa-runner with `calls` (`{name: (action, data)}`) on a binding with the given policies;
    returns the report `{name: {"ok", "code", "result" | "details"}}` and the run."""

    def run(
        calls: dict[str, tuple[str, dict[str, Any]]],
        *,
        binding: Any = None,
        conversation_id: str = "conf-a",
        **binding_fields: Any,
    ) -> dict[str, Any]:
        proxy_calls = [{"name": name, "action": action, "data": data} for name, (action, data) in calls.items()]
        binding = binding or qa_binding(**binding_fields)
        binding.runner_config = {"behaviour": "proxy", "proxy_calls": proxy_calls}
        binding.save(update_fields=["runner_config"])
        finished = wait_terminal(post_message(binding, "probe", conversation_id=conversation_id), timeout=60)
        assert finished.status == "completed", finished.error
        report: dict[str, Any] = json.loads(finished.output)
        report["__run__"] = finished
        return report

    return run
