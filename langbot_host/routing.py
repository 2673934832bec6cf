"""WebSocket URL routes of the host; each app's consumers are listed here."""

from typing import Any

websocket_urlpatterns: list[Any] = []
