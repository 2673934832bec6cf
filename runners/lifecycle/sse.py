"""`GET /api/v1/runs/{run_id}/stream`: one run's result events as Server-Sent Events (docs/architecture.md, "Live
delivery").

An async view (served by daphne over ASGI) returning a `StreamingHttpResponse` over an async generator.
Auth is the REST API's: `Authorization: Bearer <API key>` or the browser session (`?workspace=` as
elsewhere); another workspace's run answers 404.

Each result is one SSE event: `id:` is its `seq`, `event:` its type (`message.delta`, `run.completed`, ...)
and `data:` the JSON `{"id", "run_id", "seq", "type", "data"}`. Run status changes come as
`event: run.status` without an `id:`. A reconnecting `EventSource` sends `Last-Event-ID`; `?after_seq=`
does the same for other clients (the header wins). The view joins the run's group first, replays the
persisted events after that seq, then forwards live ones (deduplicated by seq), sends `: ping` comments
every `HEARTBEAT_SECONDS`, and ends after the terminal event (`run.completed`/`run.failed`), or after the
run's terminal `run.status` when it ended without one. It never polls the database, and holds no database
connection while it waits: each read gives the request thread's connection back (`foundation.db`), so
one web process serves hundreds of streams on a small pool.

A stream that cannot get a database connection in time answers 503 with `Retry-After` before it starts
(`foundation.api_errors`); once started, it ends with `event: error` carrying the API's error body
(code `unavailable`), and the client reconnects with `Last-Event-ID` after the `retry:` delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from channels.layers import get_channel_layer
from django.db import OperationalError
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from bindings.models import Workspace
from bindings.selectors import WorkspaceChoiceError, api_key_by_plaintext, workspace_for_user
from foundation.api_errors import error_body, unavailable_body
from foundation.db import pool_exhausted, read_released
from runners.live.publish import RUN_EVENT, RUN_STATUS, run_group
from runners.live.streaming import (
    TERMINAL_STATUSES,
    RunCursor,
    live_event,
    live_status,
    run_events_range,
    run_replay,
    run_status_of,
)
from runners.selectors import run_get

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
RETRY_MILLISECONDS = 3000


class _RefusedError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.response = JsonResponse(error_body(code, message, details), status=status)


def _workspace_of(authorization: str, user: Any, requested_slug: str | None) -> Workspace:
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() == "bearer":
        api_key = api_key_by_plaintext(key=key.strip())
        if api_key is None:
            raise _RefusedError(401, "unauthenticated", "Invalid or revoked API key.")
        # The scope of reading a run (bindings.roles); every role has it, so a session needs only membership.
        if api_key.scopes and "runs:read" not in api_key.scopes:
            raise _RefusedError(
                403, "forbidden", "This API key does not have the scope `runs:read`.", {"required_scope": "runs:read"}
            )
        return api_key.workspace
    if user is None or not user.is_authenticated:
        raise _RefusedError(401, "unauthenticated", "Authentication credentials were not provided.")
    try:
        return workspace_for_user(user=user, requested_slug=requested_slug)
    except WorkspaceChoiceError as exc:
        raise _RefusedError(exc.status, exc.code, exc.message) from None


def _after_seq(request: HttpRequest) -> int:
    """`Last-Event-ID` (a reconnecting EventSource) wins over `?after_seq=`; both are checked when given,
    so a malformed one is refused rather than silently overridden."""
    header = _seq(request.headers.get("Last-Event-ID"), "Last-Event-ID")
    query = _seq(request.GET.get("after_seq"), "after_seq")
    return header if header is not None else query or 0


def _seq(raw: str | None, name: str) -> int | None:
    if not raw:
        return None
    try:
        value: int | None = int(raw)
    except ValueError:
        value = None
    if value is None or value < 0:
        message = "Must be a seq: an integer, at least 0."
        raise _RefusedError(400, "invalid_argument", f"{name}: {message}", {"fields": {name: message}})
    return value


def _lookup(authorization: str, user: Any, requested_slug: str | None, run_id: str) -> tuple[int, str]:
    workspace = _workspace_of(authorization, user, requested_slug)
    run = run_get(workspace=workspace, run_id=run_id)
    if run is None:
        raise _RefusedError(404, "not_found", f"No run {run_id!r} in this workspace.")
    return workspace.pk, str(run.run_id)


# Exempt so that another method gets the API's JSON 405 below rather than CSRF's HTML 403: the view only
# ever reads.
@csrf_exempt
async def run_stream(request: HttpRequest, run_id: str) -> HttpResponseBase:
    # Not even HEAD: its answer would be held open for as long as the run lasts, to send no body.
    if request.method != "GET":
        refused = _RefusedError(405, "method_not_allowed", f'Method "{request.method}" not allowed.').response
        refused["Allow"] = "GET"
        return refused
    authorization = request.headers.get("Authorization", "")
    user = None if authorization else await request.auser()
    try:
        after_seq = _after_seq(request)
        workspace_id, public_id = await read_released(
            _lookup, authorization, user, request.GET.get("workspace") or None, run_id
        )
    except _RefusedError as refused:
        return refused.response
    body = run_events_sse(workspace_id, public_id, after_seq)
    response = StreamingHttpResponse(body, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    # Proxies such as nginx would otherwise hold the stream back in their buffers.
    response["X-Accel-Buffering"] = "no"
    return response


def sse_event(message: dict[str, Any]) -> str:
    """One `run.event` or `run.status` channel message as an SSE event."""
    if message["type"] == RUN_EVENT:
        body = {
            "id": message["id"],
            "run_id": message["run_id"],
            "seq": message["seq"],
            "type": message["event"]["type"],
            "data": message["event"]["data"],
        }
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return f"id: {message['seq']}\nevent: {body['type']}\ndata: {payload}\n\n"
    status = {k: message.get(k) for k in ("run_id", "status", "status_reason")}
    return f"event: {RUN_STATUS}\ndata: {json.dumps(status, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def run_events_sse(workspace_id: int, run_id: str, after_seq: int) -> AsyncIterator[str]:
    """The SSE body: join, replay, then live until the run's end."""
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS must be configured"
    channel = await layer.new_channel()
    group = run_group(run_id)
    await layer.group_add(group, channel)
    cursor = RunCursor()
    cursor.expect(run_id, after_seq)

    async def read(run: str, after: int, before: int | None, min_id: int) -> list[dict[str, Any]]:
        return await read_released(
            run_events_range, workspace_id=workspace_id, run_id=run, after_seq=after, before_seq=before, min_id=min_id
        )

    try:
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        async for message in run_replay(cursor, read, run_id):
            yield sse_event(message)
        if run_id in cursor.finished:
            return
        status = await read_released(run_status_of, workspace_id=workspace_id, run_id=run_id)
        if status is not None and status["status"] in TERMINAL_STATUSES:
            # Ended between the replay and the status read, or without a terminal result of its own.
            async for message in run_replay(cursor, read, run_id):
                yield sse_event(message)
            if run_id not in cursor.finished:
                yield sse_event(status)
            return
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), HEARTBEAT_SECONDS)
            except TimeoutError:
                yield ": ping\n\n"
                continue
            if message.get("type") == RUN_EVENT:
                async for delivered in live_event(cursor, read, message):
                    yield sse_event(delivered)
                if run_id in cursor.finished:
                    return
            elif message.get("type") == RUN_STATUS:
                if message.get("status") in TERMINAL_STATUSES:
                    async for delivered in live_status(cursor, read, message):
                        yield sse_event(delivered)
                    if run_id not in cursor.finished:
                        yield sse_event(message)
                    return
                yield sse_event(message)
    except OperationalError as exc:
        if not pool_exhausted(exc):
            raise
        logger.warning("SSE stream of run %s ended: no database connection available (%s)", run_id, exc)
        yield f"event: error\ndata: {json.dumps(unavailable_body(), separators=(',', ':'))}\n\n"
    finally:
        with contextlib.suppress(Exception):
            await layer.group_discard(group, channel)
