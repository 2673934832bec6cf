"""The run writer's delta coalescing (group commit): nothing waits for a timer; only what arrived while a
write was in flight is merged into the next one, and the order of a run's events never changes.

The writer (`RunExecution._write`) is driven on its own with the ledger and the publication replaced by
recorders: what is under test is which results go into which write, not the database."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from langbot_sdk.protocol import AgentRunResult
from runners.access.usage import ModelUsage
from runners.orchestrator import execution
from runners.orchestrator.execution import RunExecution


def _result(result: AgentRunResult, sequence: int) -> dict[str, Any]:
    return {**result.model_dump(mode="json", exclude_none=True), "sequence": sequence}


class _Ledger:
    """Records each write's events; a write can be held open to stand for a slow database."""

    def __init__(self) -> None:
        self.writes: list[list[tuple[str, dict[str, Any]]]] = []
        self.finished: list[tuple[str, dict[str, Any]]] | None = None
        self.gate: asyncio.Event | None = None
        self.writing = asyncio.Event()

    async def append(self, _statements: Any, *, batch: Any, **_: Any) -> list[Any]:
        self.writes.append(list(batch.events))
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        return []

    async def finish(self, _statements: Any, *, run: Any, batch: Any, outcome: Any, **_: Any) -> list[Any]:
        self.finished = list(batch.events)
        run.status = outcome.status
        return []


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> _Ledger:
    recorder = _Ledger()
    monkeypatch.setattr(execution, "ledger_append", recorder.append)
    monkeypatch.setattr(execution, "ledger_finish", recorder.finish)

    async def published(**_: Any) -> None:
        return None

    monkeypatch.setattr(execution, "run_events_publish_committed", published)
    monkeypatch.setattr(execution, "run_end_publish_committed", published)
    # Platform delivery of committed results, where the orchestrator has it: not what is under test here.
    monkeypatch.setattr(execution, "run_results_observe", lambda **_: None, raising=False)
    return recorder


def _execution() -> RunExecution:
    run = SimpleNamespace(
        last_seq=0, deadline_at=datetime.datetime.now(datetime.UTC), started_at=None, finished_at=None,
        runner_id="plugin:test/runner/default", status="running", input_events=[], binding_id=None,
    )  # fmt: skip
    session = SimpleNamespace(run_id="run-1", usage=ModelUsage())
    built = SimpleNamespace(session=session, request={}, runner_source="runtime", runner_source_key="")
    claimed = SimpleNamespace(run=run, built=built, lease_token="t")
    return RunExecution(SimpleNamespace(statements=None), claimed)  # type: ignore[arg-type]


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_delta_after_a_quiet_moment_is_written_at_once(ledger: _Ledger) -> None:
    run = _execution()
    writer = asyncio.create_task(run._write())
    run.inbox.put_nowait(_result(AgentRunResult.message_delta("run-1", "Hel"), 1))
    # No timer: a few turns of the loop, no clock time, and the delta is in the ledger.
    await _turns()
    assert ledger.writes == [[("message.delta", {"chunk": {"role": "assistant", "content": "Hel"}})]]
    run.inbox.put_nowait(_result(AgentRunResult.message_delta("run-1", "lo"), 2))
    await _turns()
    assert len(ledger.writes) == 2
    run.inbox.put_nowait(_result(AgentRunResult.run_completed("run-1"), 3))
    await asyncio.wait_for(writer, 5)
    assert ledger.finished is not None
    assert [t for t, _ in ledger.finished] == ["run.completed"]


async def test_deltas_that_arrive_during_a_write_go_together_into_the_next_one_in_order(ledger: _Ledger) -> None:
    run = _execution()
    ledger.gate = asyncio.Event()
    writer = asyncio.create_task(run._write())
    run.inbox.put_nowait(_result(AgentRunResult.message_delta("run-1", "a"), 1))
    await asyncio.wait_for(ledger.writing.wait(), 5)
    # While that write is in flight: three deltas, a tool call, one more delta.
    for seq, text in enumerate(("b", "c", "d"), start=2):
        run.inbox.put_nowait(_result(AgentRunResult.message_delta("run-1", text), seq))
    run.inbox.put_nowait(_result(AgentRunResult.tool_call_started("run-1", "c1", "search", {"q": "x"}), 5))
    run.inbox.put_nowait(_result(AgentRunResult.message_delta("run-1", "e"), 6))
    ledger.gate.set()
    await _turns()
    assert len(ledger.writes) == 2
    assert [(t, d.get("chunk", {}).get("content")) for t, d in ledger.writes[1]] == [
        ("message.delta", "bcd"),
        ("tool.call.started", None),
        ("message.delta", "e"),
    ]
    run.inbox.put_nowait(_result(AgentRunResult.run_completed("run-1"), 7))
    await asyncio.wait_for(writer, 5)
    assert run.run.status == "completed"
