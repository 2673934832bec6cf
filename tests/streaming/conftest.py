"""Fixtures for the streaming tests: members with browser sessions, WebSocket connections against the real
ASGI router, and a stand-in for the worker that persists run events and publishes them through the one
publish door (`runners.live.publish`).

The consumer and the SSE view read the database from other threads, so these tests use committed data
(`transactional_db`); the channel layer is the configured one (Redis).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from bindings.models import WorkspaceMembership
from langbot_host.asgi import application
from runners.live.publish import run_events_publish_committed, run_status_publish_committed
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, UserFactory, WorkspaceFactory
from transcripts.models import EventLog
from webchat.chat import ChatCaller

ORIGIN = (b"origin", b"http://localhost")
RECEIVE_TIMEOUT = 5


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    """Runs created here are driven by the tests, not by a worker."""
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: None)


@pytest.fixture
def member(transactional_db):
    """A user who belongs to exactly one workspace."""
    workspace = WorkspaceFactory.create()
    user = UserFactory.create()
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role=WorkspaceMembership.Role.ADMIN)
    return user, workspace


def session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def open_socket(*headers: tuple[bytes, bytes], query: str = "", communicator=WebsocketCommunicator):
    comm = communicator(application, "/ws/v1/chat/" + (f"?{query}" if query else ""), headers=list(headers))
    connected, code = await comm.connect(timeout=RECEIVE_TIMEOUT)
    return comm, connected, code


async def next_json(comm, *, skip_pings: bool = True) -> dict[str, Any]:
    while True:
        message = await comm.receive_json_from(timeout=RECEIVE_TIMEOUT)
        if not (skip_pings and message.get("type") == "ping"):
            return message


async def collect(comm, count: int) -> list[dict[str, Any]]:
    return [await next_json(comm) for _ in range(count)]


def make_run(workspace, *, conversation_id: str = "conv-1", status: str = Run.Status.RUNNING) -> Run:
    binding = AgentBindingFactory.create(workspace=workspace, concurrency_policy="parallel")
    event = EventLog.objects.create(
        workspace=workspace,
        event_id=f"evt-{uuid.uuid4().hex[:10]}",
        event_type="message.received",
        source="webui",
        conversation_id=conversation_id,
        input={"text": "hi"},
    )
    return Run.objects.create(
        workspace=workspace,
        event=event,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=binding.runner_id,
        conversation_id=conversation_id,
        status=status,
    )


def persist(run: Run, *types: str) -> list[RunEvent]:
    """What the worker's ledger does: the next seqs of the run, committed."""
    start = run.events.count()
    rows = []
    for offset, kind in enumerate(types, start=1):
        data = {"chunk": {"role": "assistant", "content": f"part{start + offset} "}} if kind == "message.delta" else {}
        rows.append(RunEvent.objects.create(run=run, seq=start + offset, type=kind, data=data))
    return rows


async def publish(run: Run, rows: list[RunEvent]) -> None:
    await run_events_publish_committed(run=run, events=rows)


async def emit(run: Run, *types: str) -> list[RunEvent]:
    rows = await database_sync_to_async(persist)(run, *types)
    await publish(run, rows)
    return rows


async def finish(run: Run, status: str = Run.Status.COMPLETED) -> None:
    def update() -> None:
        Run.objects.filter(pk=run.pk).update(status=status)
        run.refresh_from_db()

    await database_sync_to_async(update)()
    await run_status_publish_committed(run=run)


class StoppedReadingQueue(asyncio.Queue):
    """The client side of a socket whose reader has stopped: the server's sends wait until it resumes."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()
        self.reading.set()

    async def put(self, item: Any) -> None:
        await self.reading.wait()
        await super().put(item)


class SlowReaderCommunicator(WebsocketCommunicator):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._output_queue = StoppedReadingQueue()

    def stop_reading(self) -> None:
        self._output_queue.reading.clear()

    def resume_reading(self) -> None:
        self._output_queue.reading.set()


def ids(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(m["run_id"], m["seq"]) for m in messages if m["type"] == "run.event"]


def chat_caller(workspace, display_name: str = "Ada") -> ChatCaller:
    """A signed-in member of `workspace` who may send (the role of a member before roles: admin), as the
    chat socket names them."""
    user = UserFactory.create()
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role=WorkspaceMembership.Role.ADMIN)
    return ChatCaller(workspace_id=workspace.pk, principal=f"user:{user.pk}", display_name=display_name)
