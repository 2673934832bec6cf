"""One-time WebSocket tickets (docs/architecture.md, "Live delivery"): `POST /api/v1/ws-tickets` and the store behind
it.

Browsers cannot put an API key into a WebSocket handshake, and a key in a URL would end up in logs, so
an API-key client (or a session user) trades its credentials for a ticket: a random token, valid for
one connection within `TICKET_TTL_SECONDS`, that the chat consumer accepts as `?ticket=`. Tickets live
in the Django cache (Redis) and are consumed atomically: of two connections racing with one ticket, only
the one whose delete removes the key gets in.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from django.core.cache import cache
from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.authentication import ApiKeyPrincipal

TICKET_TTL_SECONDS = 60
_KEY_PREFIX = "langbot:ws-ticket:"


@dataclass(frozen=True)
class TicketGrant:
    """What a ticket lets its bearer act as: a workspace, and who asked (for the actor of messages)."""

    workspace_id: int
    principal: str  # `user:<pk>` or `api-key:<prefix>`
    display_name: str
    expires_at: float
    # Set on the admin's "try it" tickets (webchat.trying): the socket may only talk to this binding.
    binding_id: str | None = None


def _now() -> float:
    return time.time()


def ws_ticket_issue(
    *,
    workspace_id: int,
    principal: str,
    display_name: str,
    ttl: float = TICKET_TTL_SECONDS,
    binding_id: str | None = None,
) -> tuple[str, TicketGrant]:
    """Create a ticket; returns the token (shown once) and its grant."""
    ttl = max(1.0, min(float(ttl), TICKET_TTL_SECONDS))
    token = secrets.token_urlsafe(32)
    grant = TicketGrant(workspace_id, principal, display_name, _now() + ttl, binding_id)
    # The cache entry outlives the grant by a second at most; `expires_at` is what decides.
    cache.set(_KEY_PREFIX + token, asdict(grant), timeout=int(ttl) + 1)
    return token, grant


def ws_ticket_consume(*, ticket: str) -> TicketGrant | None:
    """The grant of a valid, unused, unexpired ticket, which is used up by this call; None otherwise."""
    if not ticket or len(ticket) > 128:
        return None
    key = _KEY_PREFIX + ticket
    stored = cache.get(key)
    if stored is None or not cache.delete(key):
        return None
    grant = TicketGrant(**stored)
    return grant if grant.expires_at > _now() else None


class WsTicketOut(BaseModel):
    ticket: str = Field(description="Pass as `?ticket=` when opening `/ws/v1/chat/`; valid for one connection.")
    expires_in: int = Field(description="Seconds until the ticket expires.")
    url: str = Field(description="The WebSocket path with the ticket, relative to this host.")


def _principal(request: Request) -> tuple[str, str]:
    user: Any = request.user
    if isinstance(user, ApiKeyPrincipal):
        return f"api-key:{user.api_key.prefix}", user.api_key.name or f"API key {user.api_key.prefix}"
    return f"user:{user.pk}", user.get_full_name() or user.get_username()


class WsTicketApi(APIView):
    required_scopes = {"POST": "events:write"}

    @extend_schema(
        operation_id="ws_tickets_create", parameters=[WORKSPACE_PARAMETER], request=None, responses={201: WsTicketOut}
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        principal, display_name = _principal(request)
        token, _ = ws_ticket_issue(workspace_id=workspace.pk, principal=principal, display_name=display_name)
        body = {"ticket": token, "expires_in": TICKET_TTL_SECONDS, "url": f"/ws/v1/chat/?ticket={token}"}
        return Response(body, status=201)
