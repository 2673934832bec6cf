"""daphne SIGKILLed while clients follow runs, over SSE (`GET /runs/{id}/stream`) and over the chat WebSocket
(`/ws/v1/chat/`): each client reconnects to the restarted web process — SSE with `Last-Event-ID`, the socket
with `after_id` — and ends with every result of its run exactly once, in order: the seqs the ledger holds."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time

import httpx
import pytest
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect
from websockets.typing import Origin

from runners.models import Run, RunEvent
from tests.chaos.faults import stuck_and_duplicated, wait_for
from tests.chaos.report import ChaosRow, record
from tests.processes import post_message

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLIENTS = 4
TERMINAL = ("run.completed", "run.failed")


class Follower(threading.Thread):
    """One SSE client of one run, reconnecting (to wherever `web["url"]` points now) until the run ended."""

    def __init__(self, run_id: str, key: str, web: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.run_id, self.key, self.web = run_id, key, web
        self.seqs: list[int] = []
        self.reconnects = 0
        self.done = False
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 90
        try:
            while not self.done and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    self._follow()
                if not self.done:
                    self.reconnects += 1
                    time.sleep(0.2)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        if self.seqs:
            headers["Last-Event-ID"] = str(self.seqs[-1])
        url = f"{self.web['url']}/api/v1/runs/{self.run_id}/stream"
        with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(30, connect=2)) as answer:
            if answer.status_code != 200:
                return
            event = ""
            for line in answer.iter_lines():
                if line.startswith("id: "):
                    self.seqs.append(int(line[4:]))
                elif line.startswith("event: "):
                    event = line[7:]
                elif line == "" and event in TERMINAL:
                    self.done = True
                    return


class SocketFollower(Follower):
    """One chat WebSocket client of one run's conversation, resubscribing with `after_id` after a drop."""

    def __init__(self, run_id: str, key: str, web: dict[str, str], conversation_id: str) -> None:
        super().__init__(run_id, key, web)
        self.conversation_id = conversation_id
        self.last_id: int | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 90
        try:
            while not self.done and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError, WebSocketException, OSError, TimeoutError):
                    self._follow()
                if not self.done:
                    self.reconnects += 1
                    time.sleep(0.2)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _follow(self) -> None:
        base = self.web["url"]
        ticket = httpx.post(f"{base}/api/v1/ws-tickets", headers={"Authorization": f"Bearer {self.key}"}, timeout=5)
        if ticket.status_code != 201:
            return
        url = base.replace("http://", "ws://") + ticket.json()["url"]
        with connect(url, origin=Origin(base), open_timeout=5) as socket:
            subscribe: dict[str, object] = {"type": "subscribe", "conversation_id": self.conversation_id}
            if self.last_id is not None:
                subscribe["after_id"] = self.last_id
            socket.send(json.dumps(subscribe))
            while True:
                message = json.loads(socket.recv(timeout=30))
                if message.get("type") != "run.event" or message.get("run_id") != self.run_id:
                    continue
                self.seqs.append(int(message["seq"]))
                self.last_id = int(message["id"])
                if message["event"]["type"] in TERMINAL:
                    self.done = True
                    return


def test_daphne_killed_mid_stream(start_web, worker, qa_binding) -> None:
    from bindings.services import api_key_create

    binding = qa_binding(concurrency_policy="parallel")
    _, key = api_key_create(workspace=binding.workspace)
    first = start_web()
    web = {"url": first.url}
    runs = [post_message(binding, "qa:type:6 x", conversation_id=f"d-{i}") for i in range(CLIENTS)]
    # Half the clients follow over SSE, half over the chat WebSocket.
    followers: list[Follower] = [
        Follower(str(run.run_id), key, web) if i % 2 == 0 else SocketFollower(str(run.run_id), key, web, f"d-{i}")
        for i, run in enumerate(runs)
    ]
    for follower in followers:
        follower.start()
    wait_for(lambda: all(len(f.seqs) >= 2 for f in followers), timeout=30, what="streams under way")

    os.killpg(first.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    second = start_web()
    web["url"] = second.url
    for follower in followers:
        follower.join(60)
    recovered = time.monotonic() - killed_at

    lost = repeated = 0
    for run, follower in zip(runs, followers, strict=True):
        assert follower.error is None, follower.error
        assert follower.done, f"run {run.run_id}: the stream never ended ({follower.seqs})"
        ledger = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
        lost += len(set(ledger) - set(follower.seqs))
        repeated += len(follower.seqs) - len(set(follower.seqs))
        assert follower.seqs == ledger
    assert all(f.reconnects >= 1 for f in followers), [f.reconnects for f in followers]
    stuck, duplicated = stuck_and_duplicated(str(run.run_id) for run in runs)
    completed = Run.objects.filter(pk__in=[r.pk for r in runs], status=Run.Status.COMPLETED).count()
    record(ChaosRow("daphne killed mid-stream (SSE + WebSocket)", len(runs),
                    f"{completed} completed; resumed, {lost} lost, {repeated} repeated events", recovered, stuck,
                    duplicated + repeated))  # fmt: skip
    assert (lost, repeated, stuck, duplicated) == (0, 0, 0, 0)
