"""The website chat widget's HTTP side (README, "Website chat widget"), public by design and outside `/api/v1/`:

- `GET /widget.js`: the embeddable script, from any page (`Access-Control-Allow-Origin: *`,
  `Cross-Origin-Resource-Policy: cross-origin`), cached for a while and revalidated by its ETag;
- `POST /widget/<widget id>/session`: a visitor token (new, or the one sent renewed) and a one-time socket
  ticket for `/ws/v1/widget/`. Only for a page whose `Origin` is in the bot's `allowed_origins`, and only
  for that origin does the answer carry CORS headers. No cookies are read or set: the widget keeps its
  token in the visitor's localStorage, so no CSRF token is needed (nor would one help a public endpoint).

Errors are JSON `{"error": {"code", "message"}}`: `widget.not_found` (404: no enabled web bot has this id),
`widget.origin_refused` (403), `widget.token_invalid` (403: forged, expired, or another bot's token; the
widget drops it and starts over as a new visitor), `widget.rate_limited` (429 with Retry-After),
`invalid_argument` (400).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import condition, require_http_methods

from bindings.models import Bot
from webchat.widget import (
    TICKET_TTL_SECONDS,
    Limited,
    VisitorTokenError,
    session_limit_ip,
    visitor_conversation_id,
    visitor_from_token,
    visitor_new,
    visitor_token,
    widget_bot,
    widget_origin_allowed,
    widget_ticket_issue,
)

SCRIPT_PATH = Path(__file__).resolve().parent / "static" / "widget" / "widget.js"
# The URL is pinned (pages embed it as is), so it cannot carry a version: a short lifetime, then the ETag.
SCRIPT_CACHE_CONTROL = "public, max-age=600, stale-while-revalidate=86400"
SESSION_BODY_MAX_BYTES = 4096
WIDGET_SOCKET_PATH = "/ws/v1/widget/"


@cache
def _script(mtime_ns: int) -> tuple[bytes, str]:
    body = SCRIPT_PATH.read_bytes()
    return body, hashlib.sha256(body).hexdigest()[:32]


def _script_now() -> tuple[bytes, str]:
    return _script(SCRIPT_PATH.stat().st_mtime_ns)


@require_http_methods(["GET", "HEAD"])
@condition(etag_func=lambda request: _script_now()[1])
def widget_script_view(request: HttpRequest) -> HttpResponse:
    body, _etag = _script_now()
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = SCRIPT_CACHE_CONTROL
    # Loaded by <script> from any site: no credentials involved, so `*` is safe, and CORP lets pages that
    # require it (COEP) load it too.
    response["Access-Control-Allow-Origin"] = "*"
    response["Cross-Origin-Resource-Policy"] = "cross-origin"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _error(
    status: int, code: str, message: str, *, origin: str | None = None, retry_after: int | None = None
) -> JsonResponse:
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    if retry_after is not None:
        # In the body too: a cross-origin page reads no header the answer does not expose.
        body["retry_after"] = retry_after
    response = JsonResponse(body, status=status)
    if origin:
        _cors(response, origin)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _cors(response: HttpResponse, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Allow-Methods"] = "POST, OPTIONS"
    response["Access-Control-Allow-Headers"] = "Content-Type"
    response["Access-Control-Max-Age"] = "600"
    response["Vary"] = "Origin"


def _language(request: HttpRequest, asked: Any) -> str:
    """The widget's `data-lang` when the host speaks it, else what the browser asks for."""
    if isinstance(asked, str) and asked:
        try:
            return translation.get_supported_language_variant(asked.strip().lower()[:32])
        except LookupError:
            pass
    return translation.get_language_from_request(request)


def _client_ip(request: HttpRequest) -> str:
    # daphne's `--proxy-headers` puts the client's address here behind a reverse proxy (README).
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def widget_strings() -> dict[str, str]:
    """The widget's own words, in the active language."""
    return {
        "title": _("Chat with us"),
        "open": _("Open the chat"),
        "close": _("Close the chat"),
        "placeholder": _("Type a message…"),
        "send": _("Send"),
        "unavailable": _("The chat is not available right now."),
        "failed": _("The reply failed."),
    }


@csrf_exempt
@require_http_methods(["POST", "OPTIONS"])
def widget_session_view(request: HttpRequest, widget_id: str) -> HttpResponse:
    origin = request.headers.get("Origin")
    bot = widget_bot(widget_id)
    if request.method == "OPTIONS":
        # The CORS preflight: allowed only for the bot's own origins, so other pages' browsers never send.
        if bot is None or not widget_origin_allowed(bot, origin):
            return HttpResponse(status=403)
        response = HttpResponse(status=204)
        _cors(response, str(origin))
        return response
    if bot is None:
        return _error(404, "widget.not_found", _("No chat widget has this id."))
    if not widget_origin_allowed(bot, origin):
        return _error(403, "widget.origin_refused", _("This website may not use this chat widget."))
    allowed_origin = str(origin)
    if len(request.body) > SESSION_BODY_MAX_BYTES:
        return _error(400, "invalid_argument", _("The request body is too large."), origin=allowed_origin)
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _error(400, "invalid_argument", _("The body must be a JSON object."), origin=allowed_origin)
    language = _language(request, body.get("lang"))
    with translation.override(language):
        return _session(request, bot, body, allowed_origin, language)


def _session(request: HttpRequest, bot: Bot, body: dict[str, Any], origin: str, language: str) -> HttpResponse:
    given = body.get("token")
    limited: Limited | None = session_limit_ip(_client_ip(request), new_visitor=not given)
    if limited is not None:
        return _error(
            429, "widget.rate_limited", _("Too many chat sessions from this address; try again later."),
            origin=origin, retry_after=limited.retry_after,
        )  # fmt: skip
    if given:
        try:
            visitor = visitor_from_token(bot, given)
        except VisitorTokenError:
            return _error(403, "widget.token_invalid", _("This visitor token is not valid here."), origin=origin)
    else:
        visitor = visitor_new(bot)
    ticket = widget_ticket_issue(bot=bot, visitor=visitor, origin=origin, language=language)
    response = JsonResponse(
        {
            "token": visitor_token(visitor),
            "conversation_id": visitor_conversation_id(bot, visitor),
            "ticket": ticket,
            "expires_in": TICKET_TTL_SECONDS,
            "ws_path": f"{WIDGET_SOCKET_PATH}?ticket={ticket}",
            "title": bot.name or "",
            "language": language,
            "strings": widget_strings(),
        },
        status=201,
    )
    _cors(response, origin)
    response["Cache-Control"] = "no-store"
    return response


widget_urlpatterns = [
    path("widget.js", widget_script_view, name="widget-script"),
    path("widget/<str:widget_id>/session", widget_session_view, name="widget-session"),
]
