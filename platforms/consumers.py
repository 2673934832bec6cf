"""The OneBot v11 reverse WebSocket (`/platforms/onebot/<workspace slug>/<bot_id>/ws`): a OneBot
implementation (NapCat, Lagrange) connects here as a "Universal" client, pushes its events, and carries
the bot's API calls.

Thin: the token check and the event's meaning are the adapter's (`platforms.adapters.onebot`), the update
goes to `platforms.inbound.platform_update_accept` like a webhook's. A refused token closes the handshake
(HTTP 403) and is recorded. While connected, the consumer's channel is named in the cache so that the
delivery (in a worker) can send calls here (`onebot.call`); the response with the call's `echo` goes back
to the caller's channel. The connection's status is kept for `/healthz` and the bot's admin page.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.cache import cache

from bindings.models import Bot
from platforms.adapters.onebot import RESULT_MESSAGE_TYPE, OneBotAdapter, onebot_channel_key
from platforms.connectors import connection_status_set
from platforms.inbound import inbound_refusal_record, platform_update_accept
from platforms.interface import InboundRefusedError, InboundRequest

logger = logging.getLogger(__name__)

# Calls awaiting their response, per connection; a OneBot implementation that never answers cannot grow it
# without bound (the caller gives up after its own timeout).
MAX_PENDING_CALLS = 1000


def _bot(workspace_slug: str, bot_id: str) -> Bot | None:
    return (
        Bot.objects.select_related("workspace")
        .filter(workspace__slug=workspace_slug, bot_id=bot_id, platform=OneBotAdapter.platform, enabled=True)
        .first()
    )


class OneBotConsumer(AsyncJsonWebsocketConsumer):
    bot: Bot | None = None
    adapter: OneBotAdapter | None = None

    async def connect(self) -> None:
        self.pending: dict[str, str] = {}
        kwargs = self.scope["url_route"]["kwargs"]
        bot = await database_sync_to_async(_bot)(kwargs["workspace_slug"], kwargs["bot_id"])
        if bot is None:
            await self.close()
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self.scope.get("headers") or ()}
        query = dict(parse_qsl(self.scope.get("query_string", b"").decode("latin-1")))
        client = self.scope.get("client") or ("", 0)
        request = InboundRequest(headers=headers, body=b"", query=query, remote_addr=str(client[0] or ""))
        adapter = OneBotAdapter(bot_id=bot.bot_id, credentials=bot.credentials or {})
        try:
            adapter.verify(request)
        except InboundRefusedError as exc:
            await database_sync_to_async(inbound_refusal_record)(bot=bot, request=request, error=exc)
            await self.close()
            return
        self.bot, self.adapter = bot, adapter
        await self.accept()
        await cache.aset(onebot_channel_key(bot.bot_id, adapter.access_token), self.channel_name, None)
        await database_sync_to_async(connection_status_set)(
            bot_pk=bot.pk, state="connected", detail=f"QQ {headers.get('x-self-id') or '?'}", ttl=None
        )

    async def disconnect(self, code: int) -> None:
        if self.bot is None or self.adapter is None:
            return
        key = onebot_channel_key(self.bot.bot_id, self.adapter.access_token)
        # A newer connection of the same bot may have taken the key already; leave it to that one.
        if await cache.aget(key) == self.channel_name:
            await cache.adelete(key)
            await database_sync_to_async(connection_status_set)(
                bot_pk=self.bot.pk, state="disconnected", detail=f"closed ({code})", ttl=None
            )
        for reply_to in self.pending.values():
            await self.channel_layer.send(reply_to, {"type": RESULT_MESSAGE_TYPE, "error": "the socket closed"})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or self.bot is None or self.adapter is None:
            return
        echo = content.get("echo")
        if "post_type" not in content and isinstance(echo, str):
            reply_to = self.pending.pop(echo, None)
            if reply_to is not None:
                await self.channel_layer.send(reply_to, {"type": RESULT_MESSAGE_TYPE, "response": content})
            return
        update = self.adapter.event_update(content)
        if update is not None:
            await database_sync_to_async(platform_update_accept)(bot=self.bot, update=update)

    async def onebot_call(self, message: dict[str, Any]) -> None:
        """An API call of the bot's delivery: sent to the OneBot implementation, its response awaited."""
        if len(self.pending) >= MAX_PENDING_CALLS:
            await self.channel_layer.send(
                message["reply_to"],
                {"type": RESULT_MESSAGE_TYPE, "error": "too many calls awaiting a response", "not_sent": True},
            )
            return
        self.pending[str(message["echo"])] = str(message["reply_to"])
        await self.send_json({"action": message["action"], "params": message["params"], "echo": message["echo"]})
