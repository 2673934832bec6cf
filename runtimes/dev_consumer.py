"""`/ws/v1/dev/runtime/`: the socket a development runtime (`python -m langbot_sdk dev`) dials.

The CLI on an author's machine connects out to the host (so it works from behind NAT) with a workspace's
development token (`Authorization: Bearer lbdev_...`). The envelope is JSON text, one object per message,
`type` first (docs/quickstart.md, "Developing against a running host"):

- CLI → host `runners` (its `list_agent_runners` report): synced as the session's development runners of
  the token's workspace; answered `registered` (session, workspace, available ids, errors, expiry).
- host → CLI `open` / `frame` / `close` and CLI → host `opened` / `open_failed` / `frame` / `close`: wire
  connections between a worker process and the CLI's local runtime, relayed through the channel layer.
  A worker (`runtimes.dev`) sends `dev.open` with its own reply channel to the session's group; the
  consumer keeps conn → reply channel and passes frames both ways, never interpreting them.

A refused token is answered after the handshake with one `error` message and close code 4401, so the CLI
can say why; revoking the token or its expiry ends a live session the same way. An operator disconnecting
the session, or a newer connection of the same token taking its runners over, closes it with 4403. When
the socket closes, the session's runners are marked missing and every relayed worker connection is told
`dev.closed`, which fails its runs in flight with a retryable `runtime_error`.

Thin: tokens, sessions and the catalog are `runtimes.dev_access`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.cache import cache
from django.utils import timezone
from pydantic import ValidationError

from langbot_sdk.protocol import ListAgentRunnersResponse
from runtimes.dev_access import (
    DEV_SESSION_ALIVE_SECONDS,
    DEV_SESSION_HEARTBEAT_SECONDS,
    DevTokenRefused,
    dev_session_alive_key,
    dev_session_close,
    dev_session_end_message,
    dev_session_group,
    dev_session_open,
    dev_session_runners_sync,
    dev_sessions_supersede,
    dev_token_authenticate,
)
from runtimes.models import DevelopmentSession, DevelopmentToken

logger = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
CLOSE_BAD_MESSAGE = 4400
CLOSE_ENDED = 4403
CLOSE_RECONNECT = 4000
# Worker connections relayed through one session at a time: one per worker process that ran its runners.
MAX_RELAYED_CONNECTIONS = 256


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _token_recheck(token_pk: int) -> None:
    token = DevelopmentToken.objects.only("revoked_at", "expires_at").get(pk=token_pk)
    if token.revoked_at is not None:
        raise DevTokenRefused("token_revoked", "this development token was revoked")
    if token.expires_at <= timezone.now():
        raise DevTokenRefused("token_expired", "this development token has expired; create a new one in admin")


class DevRuntimeConsumer(AsyncJsonWebsocketConsumer):
    session: DevelopmentSession | None = None

    async def connect(self) -> None:
        self.conns: dict[str, str] = {}  # conn id -> the worker's reply channel
        self._keeper: asyncio.Task[None] | None = None
        await self.accept()
        client = self.scope.get("client") or ("", 0)
        peer = f"{client[0]}:{client[1]}" if client and client[0] else ""
        try:
            token = await database_sync_to_async(dev_token_authenticate)(plaintext=_bearer(self.scope))
        except DevTokenRefused as exc:
            logger.info("development runtime from %s refused: %s", peer or "?", exc.code)
            await self._end(exc.code, exc.message, CLOSE_UNAUTHORIZED)
            return
        self.token = token
        self.session = await database_sync_to_async(dev_session_open)(token=token, peer=peer)
        await self.channel_layer.group_add(dev_session_group(self.session.session_id), self.channel_name)
        await cache.aset(dev_session_alive_key(self.session.session_id), 1, DEV_SESSION_ALIVE_SECONDS)
        self._keeper = asyncio.get_running_loop().create_task(self._keep(token.expires_at.timestamp()))
        logger.info(
            "development session %s connected for workspace %s from %s",
            self.session.session_id,
            token.workspace.slug,
            peer or "?",
        )

    async def _keep(self, expires_at: float) -> None:
        """Beat the session's heartbeat (workers end a session without one), keep the group membership
        (channels_redis forgets members after a day), and end the session when its token expires."""
        session = self.session
        assert session is not None
        while True:
            remaining = expires_at - timezone.now().timestamp()
            if remaining <= 0:
                await self._end("token_expired", "the development token has expired", CLOSE_UNAUTHORIZED)
                return
            await asyncio.sleep(min(remaining, DEV_SESSION_HEARTBEAT_SECONDS))
            if self.session is None:
                return
            try:
                await cache.aset(dev_session_alive_key(session.session_id), 1, DEV_SESSION_ALIVE_SECONDS)
                await self.channel_layer.group_add(dev_session_group(session.session_id), self.channel_name)
            except Exception:
                logger.warning("development session %s: heartbeat failed", session.session_id, exc_info=True)

    async def _end(self, code: str, message: str, close_code: int) -> None:
        await self.send_json({"type": "error", "code": code, "message": message})
        await self.close(code=close_code)

    async def disconnect(self, code: int) -> None:
        session = self.session
        if session is None:
            return
        self.session = None
        if self._keeper is not None and self._keeper is not asyncio.current_task():
            self._keeper.cancel()
        for reply_to in list(self.conns.values()):
            with contextlib.suppress(ChannelFull):
                await self.channel_layer.send(reply_to, {"type": "dev.closed", "error": "the development runtime left"})
        self.conns.clear()
        await self.channel_layer.group_discard(dev_session_group(session.session_id), self.channel_name)
        await cache.adelete(dev_session_alive_key(session.session_id))
        missing = await database_sync_to_async(dev_session_close)(
            session_id=session.session_id, reason=f"disconnected ({code})"
        )
        logger.info("development session %s ended (%s); runners now missing: %s", session.session_id, code, missing)

    # -- from the CLI ------------------------------------------------------------------------------

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.session is None:
            return
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "runners":
            await self._runners(content.get("report"))
            return
        conn = content.get("conn") if isinstance(content, dict) else None
        reply_to = self.conns.get(conn) if isinstance(conn, str) else None
        if kind not in ("opened", "open_failed", "frame", "close"):
            await self._end("bad_message", f"unknown message type {kind!r}", CLOSE_BAD_MESSAGE)
            return
        if reply_to is None or not isinstance(conn, str):
            return  # a conn the worker already closed: its late frames have nobody to go to
        if kind == "opened":
            await self._to_worker(conn, reply_to, {"type": "dev.opened", "channel": self.channel_name})
        elif kind == "frame":
            data = content.get("data")
            if isinstance(data, str):
                await self._to_worker(conn, reply_to, {"type": "dev.frame", "data": data})
        else:
            self.conns.pop(conn, None)
            error = str(content.get("error") or "the development runtime closed the connection")
            await self._to_worker(conn, reply_to, {"type": "dev.closed", "error": error[:500]})

    async def _to_worker(self, conn: str, reply_to: str, message: dict[str, Any]) -> None:
        """A worker that stopped reading (its channel is full) loses its connection, not the session."""
        try:
            await self.channel_layer.send(reply_to, message)
        except ChannelFull:
            logger.warning("development connection %s: the worker is not reading; closing it", conn)
            if self.conns.pop(conn, None) is not None:
                await self.send_json({"type": "close", "conn": conn})

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:  # not JSON
            await self._end("bad_message", "messages are JSON objects", CLOSE_BAD_MESSAGE)

    async def _runners(self, raw: Any) -> None:
        session = self.session
        assert session is not None
        try:
            report = ListAgentRunnersResponse.model_validate(raw)
        except ValidationError as exc:
            await self._end("bad_message", f"the runners report does not validate: {exc}"[:1000], CLOSE_BAD_MESSAGE)
            return
        try:
            await database_sync_to_async(_token_recheck)(self.token.pk)
        except DevTokenRefused as exc:
            await self._end(exc.code, exc.message, CLOSE_UNAUTHORIZED)
            return
        superseded = await database_sync_to_async(dev_sessions_supersede)(
            session=session, runner_ids=[manifest.id for manifest in report.runners]
        )
        for session_id in superseded:
            await self.channel_layer.group_send(
                dev_session_group(session_id),
                dev_session_end_message(
                    code="superseded", message="a newer connection with this development token serves these runners"
                ),
            )
        result = await database_sync_to_async(dev_session_runners_sync)(session=session, report=report)
        await self.send_json(
            {
                "type": "registered",
                "session": session.session_id,
                "workspace": self.token.workspace.slug,
                "available": result.available,
                "errors": [
                    {k: v for k, v in error.items() if k in ("runner_id", "error") and v}
                    for error in result.plugin_errors
                ],
                "expires_at": self.token.expires_at.isoformat(),
            }
        )

    # -- from workers (channel layer) ------------------------------------------------------------

    async def dev_open(self, message: dict[str, Any]) -> None:
        conn, reply_to = str(message["conn"]), str(message["reply_to"])
        if len(self.conns) >= MAX_RELAYED_CONNECTIONS:
            await self.channel_layer.send(
                reply_to, {"type": "dev.closed", "error": "too many worker connections to this development runtime"}
            )
            return
        self.conns[conn] = reply_to
        await self.send_json({"type": "open", "conn": conn})

    async def dev_frame(self, message: dict[str, Any]) -> None:
        conn = str(message["conn"])
        if conn in self.conns:
            await self.send_json({"type": "frame", "conn": conn, "data": message["data"]})

    async def dev_close(self, message: dict[str, Any]) -> None:
        conn = str(message["conn"])
        if self.conns.pop(conn, None) is not None:
            await self.send_json({"type": "close", "conn": conn})

    async def dev_session_end(self, message: dict[str, Any]) -> None:
        """The token was revoked (4401), or an operator or a newer connection of the same token ended the
        session (4403): either way the CLI stops rather than dialling again. A session the host lost (a
        worker found no heartbeat) closes with 4000: the CLI dials again and gets a new one."""
        code = str(message.get("code") or "unauthorized")
        if code in ("unauthorized", "token_revoked", "token_expired"):
            close_code = CLOSE_UNAUTHORIZED
        elif code in ("superseded", "disconnected"):
            close_code = CLOSE_ENDED
        else:
            close_code = CLOSE_RECONNECT
        await self._end(code, str(message.get("message") or ""), close_code)
