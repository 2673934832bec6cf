"""A development runtime through the real stack: daphne holds its socket, a Celery worker runs its runner
over the channel-layer relay, and the runtime is a real `python -m langbot_sdk.runtime --listen` on the
"author's machine" reached only through the socket it dialled (the envelope client of
tests/runners/dev_envelope_client.py plays the CLI).

The dev runner is listed and bindable in its token's workspace only, answers `POST /events?wait=`, its
proxy calls (state) are answered by the worker's handlers and audited, one outside its manifest is refused
and audited, cancel reaches it, and when the
runtime disconnects its runner goes missing and new runs are refused with a clear reason.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from bindings.services import api_key_create
from runners.lifecycle.services import run_cancel_request
from runners.models import ProxyCallAudit, Run
from runtimes.dev_access import dev_token_create
from tests.factories import WorkspaceFactory
from tests.processes import wait_status, wait_terminal
from tests.runners.dev_envelope_client import (
    DEV_RUNNER_ID,
    EnvelopeClient,
    LocalRuntime,
    WebSocketHostSocket,
    dev_plugin_write,
)

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")


class Author:
    """The author's machine: an event loop on a thread running the local runtime and the envelope client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runtime: LocalRuntime | None = None
        self.client: EnvelopeClient | None = None

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def connect(self, web_url: str, token: str, plugins_dir: Path) -> dict[str, Any]:
        async def connect() -> dict[str, Any]:
            self.runtime = await LocalRuntime(plugins_dir).start()
            host = await WebSocketHostSocket.connect(web_url.replace("http://", "ws://") + "/ws/v1/dev/runtime/", token)
            self.client = EnvelopeClient(host, self.runtime)
            return await self.client.register()

        return self.run(connect())

    def disconnect(self) -> None:
        async def disconnect() -> None:
            if self.client is not None:
                await self.client.aclose()
            if self.runtime is not None:
                await self.runtime.stop()

        self.run(disconnect())

    def stop(self) -> None:
        self.disconnect()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def author() -> Iterator[Author]:
    machine = Author()
    yield machine
    machine.stop()


def _binding(runner_id: str) -> dict[str, Any]:
    return {
        "binding_id": "dev",
        "name": "Dev",
        "scope": {"scope_type": "workspace"},
        "event_types": ["message.received"],
        "runner_id": runner_id,
    }


def _audited(run_id: str, count: int = 2, timeout: float = 15) -> list[tuple[str, str, str]]:
    deadline = time.monotonic() + timeout
    rows: list[tuple[str, str, str]] = []
    while time.monotonic() < deadline:
        rows = list(ProxyCallAudit.objects.filter(run_id=run_id).values_list("action", "outcome", "runner_id"))
        if len(rows) >= count:
            break
        time.sleep(0.2)
    return rows


def test_a_development_runner_is_listed_bound_run_audited_and_cancelled_in_its_workspace_only(
    worker, start_web, author, tmp_path
):
    web = start_web()
    mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
    _, my_key = api_key_create(workspace=mine)
    _, their_key = api_key_create(workspace=theirs)
    _, dev_token = dev_token_create(workspace=mine)

    registered = author.connect(web.url, dev_token, dev_plugin_write(tmp_path, prefix="DEV1"))
    assert registered["available"] == [DEV_RUNNER_ID]

    with (
        httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {my_key}"}, timeout=60) as me,
        httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {their_key}"}, timeout=60) as them,
    ):
        assert DEV_RUNNER_ID in [r["runner_id"] for r in me.get("/api/v1/runners").json()["items"]]
        assert DEV_RUNNER_ID not in [r["runner_id"] for r in them.get("/api/v1/runners").json()["items"]]
        refused = them.post("/api/v1/bindings", json=_binding(DEV_RUNNER_ID))
        assert refused.status_code == 400
        assert "runner_id" in refused.json()["error"]["details"]["fields"]
        created = me.post("/api/v1/bindings", json=_binding(DEV_RUNNER_ID))
        assert created.status_code == 201, created.text

        first = me.post("/api/v1/events?wait=30", json={"conversation_id": "c1", "input": {"text": "hello"}})
        second = me.post("/api/v1/events?wait=30", json={"conversation_id": "c1", "input": {"text": "again"}})

        assert first.status_code == 200, first.text
        [run] = first.json()["runs"]
        assert (run["status"], run["output"]) == ("completed", "DEV1:hello:1")
        assert second.json()["runs"][0]["output"] == "DEV1:again:2"  # the state the worker keeps, across runs
        assert sorted(_audited(run["run_id"])) == [
            ("state_get", "ok", DEV_RUNNER_ID),
            ("state_set", "ok", DEV_RUNNER_ID),
        ]

        # The host decides what the dev runner may do, as for any runner: a call outside its manifest is
        # refused, and the refusal is audited.
        probe = me.post("/api/v1/events?wait=30", json={"conversation_id": "c1", "input": {"text": "probe"}})
        [probed] = probe.json()["runs"]
        assert probed["output"] == "probe:unauthorized"
        assert ("history_search", "unauthorized", DEV_RUNNER_ID) in _audited(probed["run_id"], count=1)

        started = me.post("/api/v1/events", json={"conversation_id": "c2", "input": {"text": "wait"}})
        waiting = Run.objects.get(run_id=started.json()["runs"][0]["run_id"])
        wait_status(waiting, Run.Status.RUNNING)
        run_cancel_request(run=waiting, reason="author pressed stop")
        waiting = wait_terminal(waiting, timeout=20)
        assert (waiting.status, waiting.status_reason) == (Run.Status.CANCELLED, "author pressed stop")

        author.disconnect()
        deadline = time.monotonic() + 15
        listed: dict[str, Any] = {}
        while time.monotonic() < deadline:
            listed = {r["runner_id"]: r for r in me.get("/api/v1/runners").json()["items"]}
            if listed[DEV_RUNNER_ID]["status"] == "missing":
                break
            time.sleep(0.2)
        assert listed[DEV_RUNNER_ID]["status"] == "missing"

        after = me.post("/api/v1/events?wait=30", json={"conversation_id": "c3", "input": {"text": "anyone?"}})
        [gone] = after.json()["runs"]
        assert gone["status"] == "failed"
        assert "missing" in str(gone.get("error") or gone)
