"""WebSocket URL routes of the host; each app's consumers are listed here."""

from typing import Any

from django.urls import path

from platforms.routing import websocket_urlpatterns as platform_websocket_urlpatterns
from runners.webchat.consumers import ChatConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/v1/chat/", ChatConsumer.as_asgi()),
]

# Sockets of machines, not browsers (OneBot's reverse WebSocket): no origin check, their own token.
__all__ = ["platform_websocket_urlpatterns", "websocket_urlpatterns"]
