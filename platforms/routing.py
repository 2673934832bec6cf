"""WebSocket routes of the chat platforms: OneBot v11's reverse WebSocket. They sit outside the browser
origin check (`langbot_host.asgi`): OneBot implementations send no `Origin`, and the access token, not a
session cookie, is what admits them."""

from typing import Any

from django.urls import path

from platforms.consumers import OneBotConsumer

websocket_urlpatterns: list[Any] = [
    path("platforms/onebot/<slug:workspace_slug>/<slug:bot_id>/ws", OneBotConsumer.as_asgi()),
]
