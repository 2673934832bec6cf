"""Redis (broker, channel layer, cache) gone for a while under `make run`, then back on the same port: while it
is away `/healthz` names it and `POST /events` answers quickly; once it is back the stack takes events again
and every run queued meanwhile completes. The Redis here is this test's own `redis-server` on a free port —
never the machine's."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runners.models import Run
from tests.chaos.faults import stack_start, stuck_and_duplicated, wait_for
from tests.chaos.report import ChaosRow, record
from tests.processes import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# How long Redis stays away (the 30 s: `make chaos CHAOS_REDIS_DOWN_SECONDS=30`).
OUTAGE_SECONDS = float(os.environ.get("CHAOS_REDIS_DOWN_SECONDS") or 8)
ANSWER_WITHIN_SECONDS = 15


class OwnRedis:
    def __init__(self, port: int, directory: Path) -> None:
        self.port, self.directory = port, directory
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        assert server, "redis-server is not installed"
        argv = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.directory)]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        wait_for(lambda: _pings(redis.Redis(port=self.port, socket_connect_timeout=0.5)), timeout=10, what="redis up")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _pings(client: Any) -> bool:
    with contextlib.suppress(Exception):
        return bool(client.ping())
    return False


def test_redis_restarted_under_make_run(qa_binding, tmp_path: Path) -> None:
    from bindings.services import api_key_create

    own = OwnRedis(_free_port(), tmp_path)
    own.start()
    url = f"redis://127.0.0.1:{own.port}/0"
    stack = None
    try:
        stack = stack_start(tmp_path, REDIS_URL=url, CELERY_BROKER_URL=url, LANGBOT_SWEEP_SECONDS="2",
                            LANGBOT_QUEUED_STALE_SECONDS="3")  # fmt: skip
        binding = qa_binding(concurrency_policy="parallel")
        _, key = api_key_create(workspace=binding.workspace)
        client = httpx.Client(base_url=f"{stack.base}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)

        own.kill()
        killed_at = time.monotonic()
        _, body = wait_for(lambda: (h := stack.healthz())[0] == 503 and h, timeout=10, what="/healthz 503")
        assert body["checks"]["redis"] != "ok", body
        run_ids: list[str] = []
        answers: list[tuple[int, float]] = []
        while time.monotonic() - killed_at < OUTAGE_SECONDS:
            sent = time.monotonic()
            answer = client.post("/events", json={"conversation_id": f"r-{len(answers)}", "input": {"text": "qa:ok x"}})
            answers.append((answer.status_code, time.monotonic() - sent))
            if answer.status_code in (200, 202):
                run_ids += [r["run_id"] for r in answer.json()["runs"]]

        own.start()
        wait_for(lambda: stack.healthz()[0] == 200, timeout=60, what="/healthz 200 again")
        answer = client.post("/events?wait=30", json={"conversation_id": "r-after", "input": {"text": "qa:ok x"}})
        assert answer.status_code == 200, answer.text
        run_ids += [r["run_id"] for r in answer.json()["runs"]]
        recovered = time.monotonic() - killed_at

        def all_ended() -> bool:
            return not Run.objects.filter(run_id__in=run_ids).exclude(status__in=Run.TERMINAL_STATUSES).exists()

        wait_for(all_ended, timeout=60, what="runs queued during the outage ended")
        assert stack.process.poll() is None, stack.log()[-3000:]
        completed = Run.objects.filter(run_id__in=run_ids, status=Run.Status.COMPLETED).count()
        stuck, duplicated = stuck_and_duplicated(run_ids)
        slowest = max(seconds for _, seconds in answers)
        codes = sorted({code for code, _ in answers})
        record(ChaosRow(f"redis down {OUTAGE_SECONDS:.0f} s (make run)", len(run_ids),
                        f"{completed}/{len(run_ids)} completed; events answered {codes} within {slowest:.1f} s",
                        recovered, stuck, duplicated))  # fmt: skip
        assert completed == len(run_ids)
        assert slowest < ANSWER_WITHIN_SECONDS
        assert (stuck, duplicated) == (0, 0)
    finally:
        if stack is not None:
            stack.stop()
        own.kill()
