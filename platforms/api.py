"""The inbound webhook of every chat platform: `POST /platforms/<platform>/<workspace slug>/<bot_id>/webhook`
(and `GET` for the adapters that take it, `accepts_get`: WeCom checks its callback URL so). A batch with a
`reply_wait` (WeChat Official Accounts) is answered with what it returns once its updates are accepted.

Let the bot's adapter verify the request (on its raw bytes where the platform signs them) and read it,
hand each update to `platforms.inbound`, answer what the adapter says (Slack's and Lark's handshakes) or
`{"ok": true}`. Every refusal answers in the API's error shape:
- 404 `not_found`: an unknown or disabled bot, or a platform mismatch (without saying which);
- 413 `payload_too_large`: a body over `LANGBOT_API_BODY_MAX_BYTES`, refused from its length;
- 400 `invalid_argument`: not JSON, not the platform's shape, or nested deeper than
  `LANGBOT_API_JSON_MAX_DEPTH` (not recorded: the adapter reads bodies only through the bounded loader);
- 401/403 `unauthorized`: a forged or replayed request, counted in `InboundRefusal`;
- 429 `rate_limited` with `Retry-After`: refusals from that source past `LANGBOT_INBOUND_REFUSALS_PER_WINDOW`
  in the window. A source is still verified first, so a genuine request is never throttled for the
  forgeries of another client behind the same address.
"""

from __future__ import annotations

from django import db
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from foundation.api_errors import error_body
from foundation.limits import declared_length
from platforms.inbound import inbound_refusal_record, platform_update_accept
from platforms.interface import InboundRefusedError, InboundRequest
from platforms.registry import adapter_for_bot
from platforms.selectors import bot_for_webhook


@csrf_exempt
@require_http_methods(["GET", "POST"])
def platform_webhook(request: HttpRequest, platform: str, workspace_slug: str, bot_id: str) -> HttpResponse:
    bot = bot_for_webhook(platform=platform, workspace_slug=workspace_slug, bot_id=bot_id)
    adapter = adapter_for_bot(bot) if bot is not None else None
    if bot is None or adapter is None:
        return JsonResponse(error_body("not_found", "No such bot webhook."), status=404)
    if request.method == "GET" and not adapter.accepts_get:
        return HttpResponseNotAllowed(["POST"])
    max_bytes = int(settings.LANGBOT_API_BODY_MAX_BYTES)
    if (declared_length(request) or 0) > max_bytes:
        message = f"The request body exceeds {max_bytes} bytes."
        return JsonResponse(error_body("payload_too_large", message, {"max_bytes": max_bytes}), status=413)
    inbound = InboundRequest(
        headers={name.lower(): value for name, value in request.headers.items()},
        body=request.body,
        query=request.GET.dict(),
        remote_addr=str(request.META.get("REMOTE_ADDR") or ""),
        method=str(request.method),
    )
    try:
        adapter.verify(inbound)
        batch = adapter.parse(inbound)
    except InboundRefusedError as exc:
        if exc.reason == "malformed":
            return JsonResponse(error_body("invalid_argument", str(exc)), status=exc.status)
        counted = inbound_refusal_record(bot=bot, request=inbound, error=exc)
        if counted.throttled:
            response = JsonResponse(
                error_body("rate_limited", "Too many refused requests from this address; try again later."),
                status=429,
            )
            response["Retry-After"] = str(counted.retry_after)
        else:
            response = JsonResponse(error_body("unauthorized", str(exc)), status=exc.status)
        # Django's request log would write a line per refused request; the count above logs once a window.
        # `_has_been_logged` is Django's own marker (django.utils.log.log_response), not a public API: pinned by
        # tests/platforms/test_webhook_refusals.py, which counts every warning of 300 forged requests.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response
    results = [platform_update_accept(bot=bot, update=update, bot_current=True) for update in batch.updates]
    if batch.reply_wait is not None:
        # None: handed to the file-fetching task, whose run may still answer in time.
        started = any(r is None or (r.runs and not r.duplicate) for r in results)
        # The wait needs no database: the pooled connection goes back for others meanwhile (not inside a
        # transaction, where closing would doom it: a test's).
        if started and not db.connection.in_atomic_block:
            db.connection.close()
        body, content_type = batch.reply_wait(started)
        return HttpResponse(body, content_type=content_type)
    if batch.text_response is not None:
        return HttpResponse(batch.text_response, content_type="text/plain; charset=utf-8")
    return JsonResponse(batch.response if batch.response is not None else {"ok": True})
