"""WebSocket URL routes of the host; each app's consumers are listed here."""

from typing import Any

from django.urls import path

from runners.webchat.consumers import ChatConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/v1/chat/", ChatConsumer.as_asgi()),
]
