"""What sending a run to the workers costs, per run, on both ends of the broker (issue 19's lighter per-run
path; `runners/lifecycle/dispatch.py`). No target of its own: it shows where admission's CPU goes.

- Sender: CPU of this process per run for `run_dispatch` (one kept producer and Redis client) against
  Celery's `send_task` as it was called before (a producer from the pool and a new Redis client per
  publish), alternated, into a scratch queue nobody reads.
- Worker: CPU of a worker started as `make run` starts it (threads, concurrency 8) per run id, for
  messages of one id against messages of 8 ids (what batched admission sends when runs arrive during a
  publish). The ids name no run, so each costs the worker one run read and nothing else: the difference
  is Celery's own work per message.

Needs DATABASE_URL=postgres://... and Redis (`bench/_host.py`); exits 1 when it could not measure.
Usage: `python -m bench.dispatch_cost [--runs N] [--rounds R]`.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import psutil

from bench._host import host
from bench._report import print_grid

WORKER_BATCH = 8


def _cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - started) / calls


def _sender(runs: int, rounds: int) -> tuple[list[float], list[float]]:
    import redis
    from celery import current_app
    from django.conf import settings

    from runners.lifecycle.dispatch import RUN_EXECUTE_TASK, run_dispatch

    previous = current_app.conf.task_default_queue
    scratch = f"langbot-bench-scratch-{uuid.uuid4().hex[:8]}"
    current_app.conf.task_default_queue = scratch
    run_id = str(uuid.uuid4())
    kept: list[float] = []
    per_publish: list[float] = []
    try:
        for _ in range(rounds):
            per_publish.append(_cpu_per_call(lambda: current_app.send_task(RUN_EXECUTE_TASK, args=[run_id]), runs))
            kept.append(_cpu_per_call(lambda: run_dispatch(run_id=run_id), runs))
    finally:
        current_app.conf.task_default_queue = previous
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(scratch)
    return per_publish, kept


def _worker(worker_pid: int, runs: int, rounds: int) -> tuple[list[float], list[float]]:
    import redis
    from celery import current_app
    from django.conf import settings

    from runners.lifecycle.dispatch import RUN_EXECUTE_TASK

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue = current_app.conf.task_default_queue
    worker = psutil.Process(worker_pid)

    def cpu() -> float:
        times = worker.cpu_times()
        return times.user + times.system

    def per_run(per_message: int) -> float:
        before = cpu()
        for _ in range(runs // per_message):
            ids = [str(uuid.uuid4()) for _ in range(per_message)]
            current_app.send_task(RUN_EXECUTE_TASK, args=[ids[0]] if per_message == 1 else [ids])
        deadline = time.monotonic() + 120
        while broker.llen(queue) and time.monotonic() < deadline:
            time.sleep(0.05)
        if broker.llen(queue):
            raise SystemExit("not measured: the worker did not take its messages within 120 s")
        time.sleep(1.0)  # the last messages' tasks finish
        return (cpu() - before) / runs

    per_run(1)  # warm up
    single: list[float] = []
    batched: list[float] = []
    for _ in range(rounds):
        single.append(per_run(1))
        batched.append(per_run(WORKER_BATCH))
    return single, batched


def _span(values: list[float]) -> str:
    return f"{min(values) * 1000:.3f}-{max(values) * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with host() as worker:
        time.sleep(3)  # the worker's start-up CPU is not a message's
        per_publish, kept = _sender(args.runs, args.rounds)
        single, batched = _worker(worker.pid, args.runs, args.rounds)
    print_grid(
        ["metric", "CPU per run (min-max over rounds)"],
        [
            ["sender: send_task, producer from the pool, new Redis client", _span(per_publish)],
            ["sender: run_dispatch, kept producer and Redis client", _span(kept)],
            ["worker: one run id per message", _span(single)],
            [f"worker: {WORKER_BATCH} run ids per message", _span(batched)],
        ],
    )


if __name__ == "__main__":
    main()
