"""WebSocket URL routes of the host; each app's consumers are listed here."""

from typing import Any

from django.urls import path

from platforms.routing import websocket_urlpatterns as onebot_websocket_urlpatterns
from runtimes.dev_consumer import DevRuntimeConsumer
from webchat.consumers import ChatConsumer
from webchat.widget_consumer import WidgetConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/v1/chat/", ChatConsumer.as_asgi()),
]

# Sockets of machines, not browsers (OneBot's reverse WebSocket, a development runtime's `langbot_sdk dev`):
# no origin check and no session; each admits by its own token.
platform_websocket_urlpatterns: list[Any] = [
    *onebot_websocket_urlpatterns,
    path("ws/v1/dev/runtime/", DevRuntimeConsumer.as_asgi()),
    # The website widget's visitor socket: opened from other sites' pages, so not behind ALLOWED_HOSTS' origin
    # check; it checks the origin against its bot's allowed_origins itself, and admits by its own ticket.
    path("ws/v1/widget/", WidgetConsumer.as_asgi()),
]

__all__ = ["platform_websocket_urlpatterns", "websocket_urlpatterns"]
