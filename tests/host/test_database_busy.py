"""When no pooled database connection frees up in time, requests answer 503 `unavailable` with
`Retry-After` — in authentication, in a view or in a middleware, API or not — never a 500; `/healthz`
does not depend on the pool at all; and code that waits gives its connection back between reads."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, cast

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError, connection, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client
from psycopg_pool import PoolTimeout

from bindings.services import api_key_create
from foundation.db import released
from runners.lifecycle import sse
from runners.models import Run
from tests.factories import UserFactory, WorkspaceFactory
from tests.gateway.support import binding_for, message

pytestmark = pytest.mark.django_db(transaction=True)

# PostgreSQL with its connection pool (the default there, LANGBOT_DB_POOL): deselected in CI's SQLite pass.
needs_pool = pytest.mark.postgres


@contextmanager
def every_pooled_connection_taken() -> Iterator[None]:
    """Hold every connection of the web pool, as hundreds of waiting requests did, and make a request's
    wait for one short."""
    connections["default"].close()  # this thread's own, back to the pool first
    pool = cast(Any, connections["default"]).pool  # psycopg's pool: only the PostgreSQL backend has one
    pool.open()
    held = [pool.getconn() for _ in range(pool.max_size)]
    timeout, pool.timeout = pool.timeout, 0.3
    try:
        yield
    finally:
        pool.timeout = timeout
        for conn in held:
            pool.putconn(conn)


def bearer(workspace: Any) -> dict[str, str]:
    _, key = api_key_create(workspace=workspace)
    return {"Authorization": f"Bearer {key}"}


def assert_unavailable_json(response: Any) -> None:
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert error["message"]
    assert error["details"] == {"retry_after_seconds": 5}


@needs_pool
def test_an_api_request_that_gets_no_connection_for_its_api_key_answers_503():
    headers = bearer(WorkspaceFactory.create())

    with every_pooled_connection_taken():
        response = Client(raise_request_exception=False).get("/api/v1/runs", headers=headers)

    assert_unavailable_json(response)


@pytest.fixture
def stream_headers_then_pool_taken() -> Iterator[dict[str, str]]:
    headers = bearer(WorkspaceFactory.create())
    with every_pooled_connection_taken():
        yield headers


@needs_pool
async def test_an_sse_stream_that_gets_no_connection_answers_503_before_it_starts(stream_headers_then_pool_taken):
    client = AsyncClient(raise_request_exception=False)

    response = await client.get(f"/api/v1/runs/{uuid.uuid4()}/stream", headers=stream_headers_then_pool_taken)

    assert_unavailable_json(response)


def pool_timeout() -> OperationalError:
    """What Django raises when psycopg's pool has no connection in time."""
    try:
        try:
            raise PoolTimeout("couldn't get a connection after 0.30 sec")
        except PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


async def test_an_sse_stream_that_loses_the_database_midway_ends_with_an_error_event(monkeypatch):
    def no_connection(**_: Any) -> list[dict[str, Any]]:
        raise pool_timeout()

    monkeypatch.setattr(sse, "run_events_range", no_connection)

    frames = [frame async for frame in sse.run_events_sse(1, str(uuid.uuid4()), 0)]

    assert frames[0].startswith("retry: ")
    event, data = frames[-1].strip().split("\n")
    assert event == "event: error"
    assert json.loads(data.removeprefix("data: "))["error"]["code"] == "unavailable"


@needs_pool
def test_a_page_outside_the_api_that_gets_no_connection_answers_a_plain_503():
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    with every_pooled_connection_taken():
        response = client.get("/admin/")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/plain")


def querying_middleware(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return get_response(request)

    return middleware


@needs_pool
def test_a_middleware_that_gets_no_connection_answers_503(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.querying_middleware"]
    headers = bearer(WorkspaceFactory.create())

    with every_pooled_connection_taken():
        response = Client(raise_request_exception=False).get("/api/v1/runs", headers=headers)

    assert_unavailable_json(response)


@needs_pool
def test_a_waiting_event_whose_final_read_gets_no_connection_still_answers_with_its_runs(monkeypatch):
    workspace = WorkspaceFactory.create()
    binding_for(workspace)
    headers = bearer(workspace)
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: None)

    with ExitStack() as others:
        # While the request waits, everybody else takes the pool.
        monkeypatch.setattr(
            "runners.lifecycle.services.runs_wait", lambda **_: others.enter_context(every_pooled_connection_taken())
        )
        response = Client(raise_request_exception=False).post(
            "/api/v1/events?wait=5", message("hello"), content_type="application/json", headers=headers
        )

    assert response.status_code == 202
    [run] = response.json()["runs"]
    assert run["status"] == "queued"
    assert Run.objects.filter(run_id=run["run_id"]).exists()


@needs_pool
@pytest.mark.django_db(transaction=True, databases=["default", "health"])
def test_healthz_reports_the_database_ok_while_the_pool_is_taken(runtime_plugins):
    from tests.conftest import PLUGINS_DIR

    runtime_plugins(PLUGINS_DIR)

    with every_pooled_connection_taken():
        response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json()["checks"]["database"] == "ok"


@pytest.mark.postgres  # Django never closes an in-memory SQLite test database, the default for tests there
def test_a_read_through_released_gives_the_threads_connection_back():
    def held_after(read: Callable[[], Any]) -> bool:
        try:
            read()
            return connection.connection is not None
        finally:
            connection.close()

    assert held_after(Run.objects.count) is True
    assert held_after(released(Run.objects.count)) is False


def test_a_connection_inside_an_atomic_block_is_not_given_back():
    with transaction.atomic():
        released(Run.objects.count)()

        assert connection.connection is not None
        assert Run.objects.count() == 0


async def test_the_chat_sockets_database_calls_give_the_connection_back():
    """`webchat.consumers` reads through channels' `database_sync_to_async`, which closes stale connections
    after each call; with `CONN_MAX_AGE = 0` (required by the pool) every connection is stale."""

    def count_then_connection() -> Any:
        Run.objects.count()
        return connection

    used = await database_sync_to_async(count_then_connection)()

    assert connections["default"].settings_dict["CONN_MAX_AGE"] == 0
    assert used.connection is None
