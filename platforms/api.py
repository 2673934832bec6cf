"""The inbound webhook of every chat platform: `POST /platforms/<platform>/<workspace slug>/<bot_id>/webhook`.

Parse, let the bot's adapter verify and read the request, hand each update to `platforms.inbound`, answer
what the adapter says (Slack's and Lark's handshakes) or `{"ok": true}`. An unknown or disabled bot, or a
platform mismatch, answers 404 without saying which; a refused request answers the adapter's status and
is recorded.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from langbot_host.core.api_errors import error_body
from platforms.inbound import inbound_refusal_record, platform_update_accept
from platforms.interface import InboundRefusedError, InboundRequest
from platforms.registry import adapter_for_bot
from platforms.selectors import bot_for_webhook


@csrf_exempt
@require_POST
def platform_webhook(request: HttpRequest, platform: str, workspace_slug: str, bot_id: str) -> JsonResponse:
    bot = bot_for_webhook(platform=platform, workspace_slug=workspace_slug, bot_id=bot_id)
    adapter = adapter_for_bot(bot) if bot is not None else None
    if bot is None or adapter is None:
        return JsonResponse(error_body("not_found", "No such bot webhook."), status=404)
    inbound = InboundRequest(
        headers={name.lower(): value for name, value in request.headers.items()},
        body=request.body,
        query=request.GET.dict(),
        remote_addr=str(request.META.get("REMOTE_ADDR") or ""),
    )
    try:
        adapter.verify(inbound)
        batch = adapter.parse(inbound)
    except InboundRefusedError as exc:
        if exc.reason != "malformed":
            inbound_refusal_record(bot=bot, request=inbound, error=exc)
        code = "invalid_argument" if exc.reason == "malformed" else "unauthorized"
        return JsonResponse(error_body(code, str(exc)), status=exc.status)
    for update in batch.updates:
        platform_update_accept(bot=bot, update=update, bot_current=True)
    return JsonResponse(batch.response if batch.response is not None else {"ok": True})
