"""Routes of the debug chat under `/api/v1/`: `POST /ws-tickets` (the chat socket's ticket for API clients).
The chat's own pages are under `/chat/` (`webchat.chat.chat_urlpatterns`)."""

from django.urls import path

from webchat.tickets import WsTicketApi

urlpatterns = [
    path("ws-tickets", WsTicketApi.as_view(), name="ws-ticket-create"),
]
