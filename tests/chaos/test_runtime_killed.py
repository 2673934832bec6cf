"""The plugin runtime SIGKILLed in the middle of runs, under `make run` (a runtime over WebSocket that
run_stack.py supervises) and under `make worker` (the worker's own stdio runtime child): the runs in flight
end `failed` with a retryable `runtime_error` within seconds, `/healthz` names the runtime while it is down,
the runtime comes back by itself and new runs complete — and the rest of the stack keeps running."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from runners.lifecycle.retry import RunAttempt, run_attempt
from runners.models import Run, RunEvent
from tests.chaos.faults import descendants, stack_start, stuck_and_duplicated, wait_for
from tests.chaos.report import ChaosRow, record
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = 5
FAIL_WITHIN_SECONDS = 10


def _streaming(runs: list[Run]) -> None:
    """Wait until the runtime has every run for sure: each has written a result (`qa:type` types its reply
    a word at a time). A run merely claimed may reach the runtime only after it came back, and complete."""
    wait_for(lambda: all(RunEvent.objects.filter(run=run).exists() for run in runs), timeout=30,
             what="every run streaming")  # fmt: skip


def _assert_failed_retryable(runs: list[Run]) -> None:
    for run in runs:
        assert run.status == Run.Status.FAILED, (run.run_id, run.status, run.error)
        error = run.error or {}
        assert error.get("code") == "runtime_error", error
        assert error.get("retryable") is True, error


def test_runtime_killed_under_make_run(qa_binding, tmp_path: Path) -> None:
    from bindings.services import api_key_create

    stack = stack_start(tmp_path)
    try:
        binding = qa_binding(concurrency_policy="parallel")
        _, key = api_key_create(workspace=binding.workspace)
        client = httpx.Client(base_url=f"{stack.base}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)
        run_ids = []
        for i in range(IN_FLIGHT):
            answer = client.post("/events", json={"conversation_id": f"rt-{i}", "input": {"text": "qa:type:30 x"}})
            assert answer.status_code == 202, answer.text
            run_ids += [r["run_id"] for r in answer.json()["runs"]]
        runs = [Run.objects.get(run_id=run_id) for run_id in run_ids]
        _streaming(runs)
        (runtime,) = descendants(stack.process.pid, "langbot_sdk.runtime", "--listen")

        killed_at = time.monotonic()
        runtime.kill()
        # While it is down, the health check says so and names it.
        _status, body = wait_for(lambda: (h := stack.healthz())[0] == 503 and h, timeout=10, what="/healthz 503",
                                every=0.05)  # fmt: skip
        assert body["checks"]["runtime"] != "ok"
        assert body["checks"]["database"] == "ok"
        ended = [wait_terminal(run, timeout=FAIL_WITHIN_SECONDS) for run in runs]
        failed_after = time.monotonic() - killed_at
        _assert_failed_retryable(ended)
        assert failed_after < FAIL_WITHIN_SECONDS

        # Back by itself: a new runtime process, a healthy host, and a new run completes.
        wait_for(lambda: descendants(stack.process.pid, "langbot_sdk.runtime", "--listen"), timeout=20,
                 what="runtime restarted")  # fmt: skip
        answer = client.post("/events?wait=30", json={"conversation_id": "rt-after", "input": {"text": "qa:ok x"}})
        recovered = time.monotonic() - killed_at
        assert answer.status_code == 200, answer.text
        assert answer.json()["runs"][0]["status"] == "completed", answer.json()
        assert stack.healthz()[0] == 200
        assert stack.process.poll() is None, stack.log()[-3000:]
        assert "runtime exited with status -9; restarting it" in stack.log()

        stuck, duplicated = stuck_and_duplicated([*run_ids, answer.json()["runs"][0]["run_id"]])
        record(ChaosRow("runtime killed (make run)", len(runs), f"failed runtime_error in {failed_after:.1f} s",
                        recovered, stuck, duplicated))  # fmt: skip
        assert (stuck, duplicated) == (0, 0)
    finally:
        stack.stop()


def test_runtime_killed_under_make_worker(private_worker, qa_binding) -> None:
    worker = private_worker()
    try:
        binding = qa_binding(concurrency_policy="parallel")
        # A binding that opted in to the automatic retry: its run lost with the runtime runs again.
        retrying = qa_binding(binding_id="retrying", concurrency_policy="parallel",
                              delivery_policy={"retry": {"max_attempts": 2, "backoff_seconds": 0.2}})  # fmt: skip
        assert wait_terminal(post_message(binding, "qa:ok warm", conversation_id="w-warm")).status == "completed"
        runs = [post_message(binding, "qa:type:30 x", conversation_id=f"w-{i}") for i in range(IN_FLIGHT)]
        retried = post_message(retrying, "qa:type:8 x", conversation_id="w-retry")
        _streaming([*runs, retried])
        (runtime,) = descendants(worker.process.pid, "langbot_sdk.runtime", "--stdio")

        killed_at = time.monotonic()
        runtime.kill()
        ended = [wait_terminal(run, timeout=FAIL_WITHIN_SECONDS) for run in runs]
        failed_after = time.monotonic() - killed_at
        _assert_failed_retryable(ended)

        # The worker spawns a new runtime child on its own, before any new run asks for one.
        (respawned,) = wait_for(lambda: descendants(worker.process.pid, "langbot_sdk.runtime", "--stdio"),
                                timeout=20, what="runtime respawned")  # fmt: skip
        assert respawned.pid != runtime.pid
        after = wait_terminal(post_message(binding, "qa:ok after", conversation_id="w-after"), timeout=30)
        recovered = time.monotonic() - killed_at
        assert after.status == "completed", after.error
        retried = wait_terminal(retried, timeout=5)
        _assert_failed_retryable([retried])
        retry = wait_for(lambda: Run.objects.filter(event_id=retried.event_id).exclude(pk=retried.pk).first(),
                         timeout=10, what="the retry run")  # fmt: skip
        retry = wait_terminal(retry, timeout=30)
        assert retry.status == "completed", retry.error
        assert run_attempt(run=retry) == RunAttempt(number=2, retry_of=str(retried.run_id))

        stuck, duplicated = stuck_and_duplicated([str(r.run_id) for r in [*runs, after, retried, retry]])
        record(ChaosRow("runtime killed (make worker)", len(runs) + 1,
                        f"failed runtime_error in {failed_after:.1f} s; the opted-in run retried, completed",
                        recovered, stuck, duplicated))  # fmt: skip
        assert (stuck, duplicated) == (0, 0)
    finally:
        worker.stop()
