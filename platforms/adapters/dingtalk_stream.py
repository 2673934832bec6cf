"""DingTalk's Stream mode (钉钉 Stream 模式): the long-lived connection that brings a robot's messages
without a public URL, held by the connector process for each DingTalk bot whose credentials say
`mode: stream`.

The protocol, as DingTalk documents it: `POST /v1.0/gateway/connections/open` with the app's `clientId`,
`clientSecret` and the subscriptions (`CALLBACK` `/v1.0/im/bot/messages/get` for robot messages, `CALLBACK`
`/v1.0/card/instances/callback` for card clicks) answers an `endpoint` and a one-time `ticket`; the
WebSocket at `endpoint?ticket=...` then pushes JSON frames `{specVersion, type, headers: {topic, messageId,
...}, data}` (`data` a JSON string). `SYSTEM` frames are the server's `ping` (answered with its own data)
and `disconnect` (the server is about to close: a new connection is opened at once); every other frame is
acknowledged with `{code: 200, headers: {messageId, contentType}, message: "OK", data}`. A dropped
connection is opened again (a new ticket each time) after the backoff.

Written on `websockets` and httpx rather than the official `dingtalk-stream` SDK: the SDK opens the
connection with a blocking `requests` call inside its event loop (it would stall every other bot's
connection in the process), keeps the open-connection URL as a class-wide constant (so no per-bot
`api_base_url`, a proxy or a test's fake), passes no address guard, and retries on a fixed 10 s sleep
without reporting a state.

A message is acknowledged after it has been handed on (or found to be nothing to answer): one lost with
the connection before that is pushed again by DingTalk, and its `msgId` makes the redelivery one event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, ClassVar, Protocol, cast
from urllib.parse import quote, urlsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from foundation.outbound import addresses_refusal, resolve
from platforms.interface import (
    ConnectionClosedError,
    InboundRefusedError,
    InboundUpdate,
    PlatformConnector,
    ReplyTarget,
    inbound_json_object,
    malformed_unless_shaped,
)


class DingTalkAdapter(Protocol):
    """What the connector uses of `platforms.adapters.dingtalk.DingTalkAdapter`. That module names this
    connector as its `connector_class`, so this one describes the adapter instead of importing it: the
    import between the two goes one way."""

    bot_id: str
    allow_private: bool

    @property
    def mode(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    def _secret(self, key: str) -> str: ...

    def update_of(self, payload: dict[str, Any]) -> InboundUpdate | None: ...

    async def _send_raw(self, what: str, method: str, url: str, **kwargs: Any) -> httpx.Response: ...

    async def aclose(self) -> None: ...


logger = logging.getLogger(__name__)

OPEN_PATH = "/v1.0/gateway/connections/open"
TOPIC_ROBOT = "/v1.0/im/bot/messages/get"
TOPIC_CARD = "/v1.0/card/instances/callback"
SUBSCRIPTIONS = ({"type": "CALLBACK", "topic": TOPIC_ROBOT}, {"type": "CALLBACK", "topic": TOPIC_CARD})
USER_AGENT = "langbot-host/dingtalk-stream"
OPEN_TIMEOUT = 20.0


class StreamClosedError(ConnectionClosedError):
    """The connection ended (see `ConnectionClosedError`)."""


def ack_frame(message_id: str, data: Any) -> str:
    """The acknowledgement of a pushed frame (`data` is sent as a JSON string, as DingTalk expects)."""
    return json.dumps(
        {
            "code": 200,
            "headers": {"contentType": "application/json", "messageId": message_id},
            "message": "OK",
            "data": data if isinstance(data, str) else json.dumps(data),
        }
    )


class DingTalkStreamConnector(PlatformConnector):
    """One bot's Stream-mode connection. A bot in callback mode holds none: its connector only says so."""

    closed_detail: ClassVar[str] = "DingTalk closed the connection"

    @property
    def dingtalk(self) -> DingTalkAdapter:
        return cast("DingTalkAdapter", self.adapter)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sessions = 0

    async def run(self) -> None:
        if self.dingtalk.mode != "stream":
            # The supervisor starts a connector for every DingTalk bot; a callback-mode one is reached
            # through its webhook, so there is nothing to hold, and nothing for an alert to call down.
            self.state, self.detail = "connected", "HTTP callback mode: no connection to hold"
            try:
                await asyncio.Event().wait()
            finally:
                self.state = "stopped"
        await self.hold(self._session)

    async def _open(self) -> str:
        """A fresh endpoint + ticket (`connections/open`), as the WebSocket URL to connect to."""
        adapter = self.dingtalk
        body = {
            "clientId": adapter._secret("client_id"),
            "clientSecret": adapter._secret("client_secret"),
            "subscriptions": list(SUBSCRIPTIONS),
            "ua": USER_AGENT,
            "localIp": "",
        }
        response = await adapter._send_raw(
            "connections.open",
            "POST",
            f"{adapter.base_url}{OPEN_PATH}",
            json=body,
            headers={"accept": "application/json"},
        )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code in (400, 401, 403):
            detail = answer.get("message") or answer.get("code") if isinstance(answer, dict) else response.text[:200]
            raise StreamClosedError(f"DingTalk refused the app's credentials: {detail}", fatal=True)
        if response.status_code >= 300 or not isinstance(answer, dict):
            raise StreamClosedError(f"connections.open: HTTP {response.status_code}")
        endpoint, ticket = str(answer.get("endpoint") or ""), str(answer.get("ticket") or "")
        if not endpoint.startswith(("wss://", "ws://")) or not ticket:
            raise StreamClosedError("connections.open answered no endpoint and ticket")
        separator = "&" if "?" in endpoint else "?"
        return f"{endpoint}{separator}ticket={quote(ticket)}"

    async def _address(self, url: str) -> tuple[str, int]:
        """The endpoint comes from DingTalk's answer: the socket connects only to an address the outbound
        guard checked (TLS and the Host header still name the URL's host)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "wss" else 80)
        try:
            addresses = await asyncio.to_thread(resolve, host, port)
        except (OSError, UnicodeError) as exc:
            raise StreamClosedError(f"the stream endpoint {host} does not resolve: {exc}") from exc
        refusal = None if self.dingtalk.allow_private else addresses_refusal(host, addresses)
        if refusal is not None or not addresses:
            raise StreamClosedError(f"the stream endpoint is refused: {refusal or 'no address'}", fatal=True)
        return addresses[0], port

    async def _session(self) -> None:
        url = await self._open()
        address, port = await self._address(url)
        async with websockets.connect(url, open_timeout=OPEN_TIMEOUT, host=address, port=port) as socket:
            self.sessions += 1
            self.state, self.detail = "connected", ""
            await self._receive(socket)

    async def _receive(self, socket: ClientConnection) -> None:
        try:
            async for raw in socket:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    logger.warning("dingtalk bot %s: a stream frame that is not JSON", self.adapter.bot_id)
                    continue
                if not isinstance(frame, dict):
                    continue
                given = frame.get("headers")
                headers: dict[str, Any] = given if isinstance(given, dict) else {}
                topic = str(headers.get("topic") or "")
                message_id = str(headers.get("messageId") or "")
                kind = str(frame.get("type") or "")
                if kind == "SYSTEM":
                    if topic == "disconnect":
                        raise StreamClosedError("DingTalk asked to reconnect")
                    if topic == "ping":
                        await socket.send(ack_frame(message_id, frame.get("data") or "{}"))
                    continue
                answer = await self._callback(topic, frame.get("data"))
                await socket.send(ack_frame(message_id, answer))
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            raise StreamClosedError(f"the connection closed ({code or 'no close frame'})") from exc
        raise StreamClosedError(f"the connection closed ({socket.close_code})")

    async def _callback(self, topic: str, data: Any) -> dict[str, Any]:
        """Hand one pushed callback on; the acknowledgement's data."""
        if topic not in (TOPIC_ROBOT, TOPIC_CARD):
            return {"status": "SUCCESS", "message": "success"}  # an event subscription's push: nothing to do
        try:
            payload = inbound_json_object(str(data or ""), what="not a DingTalk stream push")
            with malformed_unless_shaped("not a DingTalk stream push"):
                update = (
                    self.dingtalk.update_of(payload)
                    if topic == TOPIC_ROBOT
                    else card_clicked_update(self.dingtalk, payload)
                )
        except InboundRefusedError as exc:
            logger.warning("dingtalk bot %s: a %s push was refused: %s", self.adapter.bot_id, topic, exc)
            return {"response": None}
        if update is not None:
            try:
                await self.on_update(update)
            except Exception:
                # One message that cannot become an event must not drop the bot's connection.
                logger.exception("dingtalk bot %s: a pushed message could not be accepted", self.adapter.bot_id)
        return {"response": None} if topic == TOPIC_ROBOT else {"cardUpdateOptions": {}, "userPrivateData": {}}


def card_clicked_update(adapter: DingTalkAdapter, payload: dict[str, Any]) -> InboundUpdate | None:
    """A card's button or form, pushed on the card callback topic, as a `card.clicked` event: which card
    (`outTrackId`), who (`userId`), and what (`value`'s `cardPrivateData`: `actionIds` and `params`)."""
    out_track_id = str(payload.get("outTrackId") or "")
    user = str(payload.get("userId") or "")
    if not out_track_id or not user:
        raise InboundRefusedError("malformed", "a card callback without outTrackId or userId", status=400)
    value = payload.get("value")
    action: Any = inbound_json_object(value, what="a card callback's value") if isinstance(value, str) else value
    private = action.get("cardPrivateData") if isinstance(action, dict) else None
    private = private if isinstance(private, dict) else {}
    space_type = str(payload.get("spaceType") or "")
    space_id = str(payload.get("spaceId") or "")
    in_group = space_type == "IM_GROUP" or space_id.startswith("cid")
    chat_id = space_id if in_group and space_id else f"user:{user}"
    extra: dict[str, Any] = {"conversation_type": "group" if in_group else "single"}
    if in_group and space_id:
        extra["conversation_id"] = space_id
    target = ReplyTarget(chat_id=chat_id, extra=extra)
    action_ids = [str(a) for a in private.get("actionIds") or [] if isinstance(a, str | int)]
    params = private.get("params") if isinstance(private.get("params"), dict) else {}
    clicked_at = payload.get("createTime") or payload.get("time") or ""
    return InboundUpdate(
        envelope={
            "event_id": f"dingtalk:{adapter.bot_id}:card:{out_track_id}:{user}:{clicked_at or time.time_ns()}",
            "event_type": "card.clicked",
            "source_event_type": "card.instances.callback",
            "actor": {"actor_type": "user", "actor_id": user, "actor_name": user[:255]},
            "subject": {
                "subject_type": "message",
                "subject_id": out_track_id,
                "data": {"chat_type": "group" if in_group else "private"},
            },
            "input": {"text": None},
            "data": {
                "chat_id": chat_id,
                "chat_type": "group" if in_group else "private",
                "target_message_id": out_track_id,
                "action": {"ids": action_ids, "params": params},
                "reply_target": target.as_data(),
                "raw": {k: v for k, v in payload.items() if k != "value"} | {"value": action},
            },
        }
    )
