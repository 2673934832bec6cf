"""`GET /api/v1/runs/{run_id}/stream`: persisted events first (from Last-Event-ID or after_seq), then live
ones, heartbeat comments while idle, and the end of the stream after the run's terminal event."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from bindings.services import api_key_create
from runners.lifecycle import sse
from runners.models import Run
from tests.factories import WorkspaceFactory
from tests.streaming.conftest import emit, finish, make_run, persist

pytestmark = pytest.mark.django_db(transaction=True)


class KeyClient:
    """An async test client that sends the workspace's API key with every request."""

    def __init__(self, key: str) -> None:
        self.client = AsyncClient()
        self.key = key

    async def get(self, path: str, headers: dict[str, str] | None = None):
        return await self.client.get(path, headers={"Authorization": f"Bearer {self.key}", **(headers or {})})


async def api_key_client(workspace) -> KeyClient:
    _, key = await database_sync_to_async(api_key_create)(workspace=workspace)
    return KeyClient(key)


def parse(body: str) -> list[dict]:
    """SSE frames as dicts: `id`, `event`, `data` (JSON-decoded), or `comment`."""
    frames = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        frame: dict = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                frame["comment"] = line[1:].strip()
            else:
                name, _, value = line.partition(": ")
                frame[name] = json.loads(value) if name == "data" else value
        frames.append(frame)
    return frames


async def read_all(response, on_first_chunk=None) -> str:
    chunks: list = []
    iterator = response.streaming_content.__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(iterator.__anext__(), 5)
        except StopAsyncIteration:
            return "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
        chunks.append(chunk)
        if on_first_chunk is not None and len(chunks) == 1:
            await on_first_chunk()


def events_of(frames: list[dict]) -> list[tuple[str, str]]:
    return [(f["id"], f["event"]) for f in frames if "id" in f]


async def test_a_finished_run_streams_its_persisted_events_and_ends(workspace):
    run = await database_sync_to_async(make_run)(workspace, status=Run.Status.COMPLETED)
    await database_sync_to_async(persist)(run, "message.delta", "message.completed", "run.completed")
    client = await api_key_client(workspace)

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream")
    frames = parse(await read_all(response))

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert events_of(frames) == [("1", "message.delta"), ("2", "message.completed"), ("3", "run.completed")]
    assert frames[1]["data"]["run_id"] == str(run.run_id)
    assert frames[1]["data"]["seq"] == 1


async def test_last_event_id_replays_only_what_came_after_then_follows_live_until_the_end(workspace):
    run = await database_sync_to_async(make_run)(workspace)
    await database_sync_to_async(persist)(run, "message.delta", "message.delta", "message.delta")
    client = await api_key_client(workspace)

    async def runner_goes_on():
        await emit(run, "message.delta", "message.completed", "run.completed")

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream", headers={"Last-Event-ID": "1"})
    frames = parse(await read_all(response, on_first_chunk=runner_goes_on))

    assert [i for i, _ in events_of(frames)] == ["2", "3", "4", "5", "6"]
    assert events_of(frames)[-1] == ("6", "run.completed")


async def test_after_seq_does_what_last_event_id_does_for_clients_without_the_header(workspace):
    run = await database_sync_to_async(make_run)(workspace, status=Run.Status.COMPLETED)
    await database_sync_to_async(persist)(run, "message.delta", "message.delta", "run.completed")
    client = await api_key_client(workspace)

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream?after_seq=2")

    assert events_of(parse(await read_all(response))) == [("3", "run.completed")]


async def test_a_run_that_ends_without_a_terminal_result_ends_the_stream_with_its_status(workspace):
    run = await database_sync_to_async(make_run)(workspace, status=Run.Status.QUEUED)
    client = await api_key_client(workspace)

    async def cancelled():
        await finish(run, Run.Status.CANCELLED)

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream", headers={"Last-Event-ID": "0"})
    frames = parse(await read_all(response, on_first_chunk=cancelled))

    assert frames[-1]["event"] == "run.status"
    assert frames[-1]["data"]["status"] == "cancelled"


async def test_an_idle_stream_sends_heartbeat_comments(workspace, monkeypatch):
    monkeypatch.setattr(sse, "HEARTBEAT_SECONDS", 0.05)
    run = await database_sync_to_async(make_run)(workspace)
    client = await api_key_client(workspace)
    response = await client.get(f"/api/v1/runs/{run.run_id}/stream")
    iterator = response.streaming_content.__aiter__()

    chunks = [await asyncio.wait_for(iterator.__anext__(), 5) for _ in range(3)]
    await emit(run, "run.completed")
    rest = await read_all(response)

    assert any(c == b": ping\n\n" or c == ": ping\n\n" for c in chunks)
    assert events_of(parse(rest))[-1] == ("1", "run.completed")


async def test_another_workspaces_run_answers_404(workspace):
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    run = await database_sync_to_async(make_run)(stranger)
    client = await api_key_client(workspace)

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_the_stream_needs_credentials(workspace):
    run = await database_sync_to_async(make_run)(workspace)

    anonymous = await AsyncClient().get(f"/api/v1/runs/{run.run_id}/stream")
    wrong_key = await KeyClient("lbk_nope_nope").get(f"/api/v1/runs/{run.run_id}/stream")

    assert anonymous.status_code == wrong_key.status_code == 401


async def test_a_malformed_cursor_is_refused(workspace):
    run = await database_sync_to_async(make_run)(workspace)
    client = await api_key_client(workspace)

    response = await client.get(f"/api/v1/runs/{run.run_id}/stream?after_seq=soon")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"].keys() == {"after_seq"}


async def test_a_malformed_cursor_is_refused_even_when_the_other_one_would_win(workspace):
    run = await database_sync_to_async(make_run)(workspace)
    client = await api_key_client(workspace)

    bad_query = await client.get(f"/api/v1/runs/{run.run_id}/stream?after_seq=-3", headers={"Last-Event-ID": "1"})
    bad_header = await client.get(f"/api/v1/runs/{run.run_id}/stream?after_seq=1", headers={"Last-Event-ID": "x"})

    assert bad_query.status_code == bad_header.status_code == 400
    assert bad_query.json()["error"]["details"]["fields"].keys() == {"after_seq"}
    assert bad_header.json()["error"]["details"]["fields"].keys() == {"Last-Event-ID"}


async def test_another_method_gets_the_api_405_not_a_csrf_page(workspace):
    run = await database_sync_to_async(make_run)(workspace)
    _, key = await database_sync_to_async(api_key_create)(workspace=workspace)
    # As a real client is treated: the test client skips CSRF checks unless asked.
    client = AsyncClient(enforce_csrf_checks=True)

    headers = {"Authorization": f"Bearer {key}"}
    post = await client.post(f"/api/v1/runs/{run.run_id}/stream", headers=headers)
    head = await client.head(f"/api/v1/runs/{run.run_id}/stream", headers=headers)

    assert post.status_code == head.status_code == 405
    assert post.json()["error"]["code"] == "method_not_allowed"
    assert post["Allow"] == "GET"
