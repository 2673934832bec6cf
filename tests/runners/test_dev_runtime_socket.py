"""`/ws/v1/dev/runtime/` against the real ASGI application and channel layer: development tokens admit a
development runtime and nothing else; its runners register for the token's workspace only; a worker's
connection is relayed to the local runtime; a session that ends marks its runners missing and fails what
was relayed through it, at once and retryably."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from rest_framework.test import APIClient

from bindings.models import RunnerDescriptor
from langbot_host.asgi import application
from langbot_sdk.protocol import Action, AgentAPIException
from runtimes import dev as dev_module
from runtimes.dev import DevRunnerHost
from runtimes.dev_access import dev_token_create, dev_tokens_revoke
from runtimes.models import DevelopmentSession, DevelopmentToken
from tests.factories import WorkspaceFactory
from tests.runners.dev_envelope_client import (
    DEV_RUNNER_ID,
    CommunicatorSocket,
    EnvelopeClient,
    dev_plugin_write,
    local_runtime,
)

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/ws/v1/dev/runtime/"


@pytest.fixture(autouse=True)
async def _close_thread_connections():
    """The consumer and the relay's session check use the database from asgiref's executor thread, whose
    connection outlives the test and would hold the test database open at teardown."""
    yield
    from django.db import connections

    await database_sync_to_async(connections.close_all)()


def _communicator(token: str | None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token is not None else []
    return WebsocketCommunicator(application, PATH, headers=headers)


async def _refusal(token: str | None) -> tuple[dict[str, Any], int | None]:
    communicator = _communicator(token)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    message = await communicator.receive_json_from(timeout=5)
    closed = await communicator.receive_output(timeout=5)
    assert closed["type"] == "websocket.close"
    return message, closed.get("code")


def _token(**kwargs: Any) -> tuple[DevelopmentToken, str]:
    workspace = kwargs.pop("workspace", None) or WorkspaceFactory.create()
    return dev_token_create(workspace=workspace, **kwargs)


async def test_a_missing_wrong_expired_or_revoked_token_is_refused_with_a_reason():
    def given() -> dict[str, str]:
        _, good = _token()
        expired, expired_plain = _token()
        DevelopmentToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        revoked, revoked_plain = _token()
        dev_tokens_revoke(tokens=[revoked])
        prefix, _, secret = good.rpartition("_")
        return {
            "wrong": f"{prefix}_{'x' * len(secret)}",
            "api_key_shape": good.replace("lbdev_", "lbk_"),
            "expired": expired_plain,
            "revoked": revoked_plain,
        }

    tokens = await database_sync_to_async(given)()

    missing, missing_code = await _refusal(None)
    wrong, wrong_code = await _refusal(tokens["wrong"])
    shaped, shaped_code = await _refusal(tokens["api_key_shape"])
    expired, expired_code = await _refusal(tokens["expired"])
    revoked, revoked_code = await _refusal(tokens["revoked"])

    assert [missing["code"], wrong["code"], shaped["code"]] == ["unauthorized"] * 3
    assert expired["code"] == "token_expired"
    assert "expired" in expired["message"]
    assert revoked["code"] == "token_revoked"
    assert {missing_code, wrong_code, shaped_code, expired_code, revoked_code} == {4401}
    assert await database_sync_to_async(DevelopmentSession.objects.count)() == 0


def test_a_development_token_is_refused_by_the_rest_api_and_the_chat_ticket(workspace, api_client_for):
    _, plaintext = dev_token_create(workspace=workspace)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")

    assert client.get("/api/v1/runners").status_code == 401
    assert client.post("/api/v1/ws-tickets", {}, format="json").status_code in (401, 403)
    assert client.post("/api/v1/events", {"event_type": "message.received"}, format="json").status_code == 401
    # The same request with the workspace's API key gets through: the refusal is the token's.
    assert api_client_for(workspace).get("/api/v1/runners").status_code == 200


async def test_runners_register_for_the_tokens_workspace_only_and_go_missing_when_it_disconnects(tmp_path: Path):
    def given() -> tuple[Any, Any, str]:
        mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
        _, plaintext = dev_token_create(workspace=mine)
        return mine, theirs, plaintext

    mine, theirs, plaintext = await database_sync_to_async(given)()
    communicator = _communicator(plaintext)
    assert (await communicator.connect(timeout=5))[0]

    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()

        assert registered["available"] == [DEV_RUNNER_ID]
        assert registered["workspace"] == mine.slug

        def listed() -> tuple[list[str], list[str], Any, Any]:
            descriptor = RunnerDescriptor.objects.get(runner_id=DEV_RUNNER_ID)
            session = DevelopmentSession.objects.get(session_id=registered["session"])

            def ids(ws: Any) -> list[str]:
                return [r["runner_id"] for r in _api(ws).get("/api/v1/runners").json()["items"]]

            return ids(mine), ids(theirs), descriptor, session

        in_mine, in_theirs, descriptor, session = await database_sync_to_async(listed)()
        assert DEV_RUNNER_ID in in_mine
        assert DEV_RUNNER_ID not in in_theirs
        assert (descriptor.source, descriptor.source_key, descriptor.workspace_id) == (
            "dev",
            registered["session"],
            mine.pk,
        )
        assert session.runner_ids == [DEV_RUNNER_ID]
        assert session.ended_at is None

        await client.aclose()

    def after() -> tuple[str, Any]:
        return (
            RunnerDescriptor.objects.get(runner_id=DEV_RUNNER_ID).status,
            DevelopmentSession.objects.get(session_id=registered["session"]).ended_at,
        )

    status, ended_at = await database_sync_to_async(after)()
    assert status == RunnerDescriptor.Status.MISSING
    assert ended_at is not None


def _api(workspace: Any) -> APIClient:
    from bindings.services import api_key_create

    _, key = api_key_create(workspace=workspace)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


async def test_a_worker_connection_is_relayed_to_the_local_runtime_and_fails_when_the_session_ends(
    tmp_path: Path,
):
    def given() -> str:
        return dev_token_create(workspace=WorkspaceFactory.create())[1]

    plaintext = await database_sync_to_async(given)()
    communicator = _communicator(plaintext)
    assert (await communicator.connect(timeout=5))[0]
    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()
        host = DevRunnerHost(registered["session"], handlers={})

        # A wire call from the "worker" reaches the author's runtime through the socket and back.
        listed = await (await host.connection()).call(Action.LIST_AGENT_RUNNERS, {}, timeout=10)
        assert [r["id"] for r in listed["runners"]] == [DEV_RUNNER_ID]
        assert len(client.opened) == 1

        # The CLI reloading closes its local connections; the worker opens a fresh one on its next call.
        await client.close_local_connections()
        await asyncio.sleep(0.3)
        again = await (await host.connection()).call(Action.LIST_AGENT_RUNNERS, {}, timeout=10)
        assert again["runners"]
        assert len(client.opened) == 2

        # The socket going away fails what is relayed through it at once, retryably.
        connection = await host.connection()
        pending = asyncio.ensure_future(connection.call(Action.LIST_AGENT_RUNNERS, {}, timeout=60))
        await client.aclose()
        with pytest.raises(AgentAPIException) as failed:
            async with asyncio.timeout(10):
                await pending
        assert failed.value.error.code == "runtime_error"
        assert failed.value.error.retryable
        await host.aclose()


async def test_a_session_that_is_gone_fails_the_run_retryably_instead_of_hanging(monkeypatch):
    monkeypatch.setattr(dev_module, "OPEN_TIMEOUT", 0.5)
    host = DevRunnerHost("0" * 32, handlers={})

    async def run() -> None:
        async with asyncio.timeout(5), host.run_agent({"run_id": "r"}) as stream:
            async for _ in stream:
                pass

    with pytest.raises(AgentAPIException) as failed:
        await run()

    assert failed.value.error.code == "runtime_error"
    assert failed.value.error.retryable
    assert "development runtime" in failed.value.error.message


async def test_revoking_the_token_disconnects_its_live_session(tmp_path: Path):
    def given() -> tuple[DevelopmentToken, str]:
        return _token()

    token, plaintext = await database_sync_to_async(given)()
    communicator = _communicator(plaintext)
    assert (await communicator.connect(timeout=5))[0]
    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()

        await database_sync_to_async(dev_tokens_revoke)(tokens=[token])

        async with asyncio.timeout(10):
            await client.ended.wait()
        assert client.closed_code == 4401
        assert client.errors[-1]["code"] == "token_revoked"
        await client.aclose()

    status = await database_sync_to_async(lambda: RunnerDescriptor.objects.get(runner_id=DEV_RUNNER_ID).status)()
    assert registered["available"] == [DEV_RUNNER_ID]
    assert status == RunnerDescriptor.Status.MISSING


async def test_a_newer_connection_of_the_same_token_takes_over_runners_a_dead_session_still_holds(tmp_path: Path):
    """A web process killed under a session never closes it; the author's CLI dialling again must get its
    runners back, while another token of the workspace still may not take them."""
    from langbot_sdk.protocol import ListAgentRunnersResponse
    from runtimes.dev_access import dev_session_open, dev_session_runners_sync

    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        report = await runtime.list_runners()

        def given() -> tuple[str, str, str]:
            token, plaintext = _token()
            _, other_plaintext = dev_token_create(workspace=token.workspace)
            stale = dev_session_open(token=token)
            dev_session_runners_sync(session=stale, report=ListAgentRunnersResponse.model_validate(report))
            return stale.session_id, plaintext, other_plaintext

        stale_id, plaintext, other_plaintext = await database_sync_to_async(given)()

        other = _communicator(other_plaintext)
        assert (await other.connect(timeout=5))[0]
        other_client = EnvelopeClient(CommunicatorSocket(other), runtime)
        refused = await other_client.register()
        await other_client.aclose()
        assert refused["available"] == []
        assert "already served" in refused["errors"][0]["error"]

        communicator = _communicator(plaintext)
        assert (await communicator.connect(timeout=5))[0]
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()

        def after() -> tuple[str, Any, str]:
            descriptor = RunnerDescriptor.objects.get(runner_id=DEV_RUNNER_ID)
            stale = DevelopmentSession.objects.get(session_id=stale_id)
            return descriptor.source_key, stale.ended_at, descriptor.status

        source_key, stale_ended_at, status = await database_sync_to_async(after)()
        assert registered["available"] == [DEV_RUNNER_ID]
        assert (source_key, status) == (registered["session"], RunnerDescriptor.Status.AVAILABLE)
        assert stale_ended_at is not None
        await client.aclose()


async def test_a_relayed_connection_closes_when_its_session_ends_without_a_word_from_its_web_process(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(dev_module, "SESSION_CHECK_SECONDS", 0.2)
    plaintext = await database_sync_to_async(lambda: _token()[1])()
    communicator = _communicator(plaintext)
    assert (await communicator.connect(timeout=5))[0]
    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()
        host = DevRunnerHost(registered["session"], handlers={})
        connection = await host.connection()
        assert not connection.closed

        # What a killed web process leaves: the session ended in the database, nobody told the worker.
        await database_sync_to_async(
            lambda: DevelopmentSession.objects.filter(session_id=registered["session"]).update(ended_at=timezone.now())
        )()

        async with asyncio.timeout(15):  # a shared CI machine can be slow; the point is that it closes
            await connection.wait_closed()
        await host.aclose()
        await client.aclose()


async def test_a_session_whose_web_process_stopped_beating_is_ended_by_the_worker_that_notices(
    tmp_path: Path, monkeypatch
):
    """daphne, terminated, does not run its consumers' disconnect: the session's heartbeat stops and the
    worker relaying a run to it closes the connection, ends the session and marks its runners missing (here
    the key is deleted under a live consumer, which is then asked to close so its CLI dials again)."""
    from django.core.cache import cache

    from runtimes.dev_access import dev_session_alive_key

    monkeypatch.setattr(dev_module, "SESSION_CHECK_SECONDS", 0.2)
    plaintext = await database_sync_to_async(lambda: _token()[1])()
    communicator = _communicator(plaintext)
    assert (await communicator.connect(timeout=5))[0]
    async with local_runtime(dev_plugin_write(tmp_path)) as runtime:
        client = EnvelopeClient(CommunicatorSocket(communicator), runtime)
        registered = await client.register()
        host = DevRunnerHost(registered["session"], handlers={})
        connection = await host.connection()

        await cache.adelete(dev_session_alive_key(registered["session"]))  # the web process stopped beating

        async with asyncio.timeout(15):
            await connection.wait_closed()
        with pytest.raises(AgentAPIException) as refused:
            await host.connection()
        # Had its consumer lived after all, it is told, and closes so that the CLI dials again.
        async with asyncio.timeout(15):
            await client.ended.wait()
        assert client.closed_code == 4000
        assert client.errors[-1]["code"] == "session_lost"
        await host.aclose()
        await client.aclose()

    def after() -> tuple[str, str]:
        session = DevelopmentSession.objects.get(session_id=registered["session"])
        return RunnerDescriptor.objects.get(runner_id=DEV_RUNNER_ID).status, session.close_reason

    status, reason = await database_sync_to_async(after)()
    assert status == RunnerDescriptor.Status.MISSING
    assert reason == "its web process stopped answering"
    assert "session has ended" in refused.value.error.message


async def test_a_frame_the_relay_has_no_room_for_closes_the_connection_instead_of_crashing_the_worker(monkeypatch):
    from channels.layers import get_channel_layer

    from langbot_sdk.wire import TransportClosed
    from runners.live.layers import BatchedRedisChannelLayer
    from runtimes.dev import ChannelRelayTransport

    monkeypatch.setattr(dev_module, "SEND_FULL_WAIT_SECONDS", 0.05)
    hosts = get_channel_layer().hosts  # the configured Redis
    small = BatchedRedisChannelLayer(hosts=hosts, capacity=1, expiry=5, prefix="asgi-test-full")
    transport = ChannelRelayTransport(
        small, conn="c1", reply_channel=await small.new_channel(), consumer_channel="dev-full-consumer", session_id="s"
    )
    try:
        await transport.send(b'{"seq_id":1}')  # fills the consumer's channel, which nobody reads
        with pytest.raises(TransportClosed, match="stayed full"):
            await transport.send(b'{"seq_id":2}')
    finally:
        await transport.close()
        await small.flush()
