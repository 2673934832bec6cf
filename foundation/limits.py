"""Limits on what a request may carry, applied before a view reads its body (docs/architecture.md, "The REST API").

`RequestLimitsMiddleware` makes every body one the API can read or refuse in its error shape:
- a chunked body (`Transfer-Encoding: chunked`, no Content-Length) gets its length from the body the ASGI
  handler has already received, so parsers read it instead of seeing an empty body; where that length
  cannot be known the request answers 411 `length_required`;
- a JSON body of a view that takes the API's JSON parser is capped at `LANGBOT_API_BODY_MAX_BYTES` (413
  `payload_too_large`, from the length before anything is read); views that name their own parsers keep
  their own caps (`/events`: `LANGBOT_MAX_EVENT_BYTES`; artifact and knowledge-document uploads);
- a JSON body nesting deeper than `LANGBOT_API_JSON_MAX_DEPTH` answers 400 `invalid_argument` naming the
  top-level field, found by `json_too_deep` without parsing: a parser, pydantic or a walk over the data
  would otherwise end in a RecursionError (a 500).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext_noop
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.utils.mediatypes import media_type_matches

from foundation.api_errors import ApiError, error_body, invalid_fields, is_api_request

# Methods whose body the API never reads.
_BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

# A JSON string (escapes included) or a bracket: what the depth scan needs to see.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def json_too_deep(raw: bytes, max_depth: int) -> str | None:
    """Where the JSON text `raw` nests deeper than `max_depth`: its top-level key (`"(body)"` when the
    body itself is the deep part), or None. Text with fewer brackets than the limit is not scanned."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return None
    depth = 0
    top_level_object = False
    last_string = b""
    top_key = None
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        if token[:1] == b'"':
            last_string = token
        elif token == b":":
            if depth == 1 and top_level_object:
                top_key = last_string
        elif token in (b"[", b"{"):
            if depth == 0:
                top_level_object = token == b"{"
            depth += 1
            if depth > max_depth:
                return _key_name(top_key) if depth > 1 and top_key is not None else "(body)"
        else:
            depth -= 1
            if depth == 1:
                top_key = None
    return None


def _key_name(token: bytes) -> str:
    return token[1:-1].decode("utf-8", "replace")


# Marked for the catalogue only: the API answers it in English; the chat socket shows it translated
# (`gettext(TOO_DEEP_MESSAGE)`) in the page's language.
TOO_DEEP_MESSAGE = gettext_noop("Nested more than %(depth)d levels deep.")


def too_deep_message(max_depth: int) -> str:
    return TOO_DEEP_MESSAGE % {"depth": max_depth}


def payload_too_large(max_bytes: int) -> ApiError:
    message = f"The request body exceeds {max_bytes} bytes; send large content as an artifact."
    return ApiError(413, "payload_too_large", message, {"max_bytes": max_bytes})


class LimitedJSONParser(JSONParser):
    """DRF's JSON parser reading no more than `LANGBOT_API_BODY_MAX_BYTES` (413) and refusing JSON nested
    deeper than `LANGBOT_API_JSON_MAX_DEPTH`. `RequestLimitsMiddleware` refuses both before the body is read
    for a view whose parsers are all of this kind; the parser holds wherever the middleware did not run."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        max_bytes = settings.LANGBOT_API_BODY_MAX_BYTES
        raw = stream.read(max_bytes + 1) if stream is not None else b""
        if len(raw) > max_bytes:
            raise payload_too_large(max_bytes)
        max_depth = settings.LANGBOT_API_JSON_MAX_DEPTH
        where = json_too_deep(raw, max_depth)
        if where is not None:
            raise invalid_fields({where: too_deep_message(max_depth)})
        return super().parse(io.BytesIO(raw), media_type, parser_context)


def declared_length(request: HttpRequest) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


class RequestLimitsMiddleware:
    """See the module docstring; placed before CSRF and authentication have read anything."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _is_chunked(request) and declared_length(request) is None and not _chunked_length_set(request):
            return _refused(request, 411, "length_required", "Send the body with a Content-Length.")
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        if not is_api_request(request) or request.method in _BODYLESS_METHODS:
            return None
        length = declared_length(request) or 0
        parser_classes: list[type[BaseParser]] | None = getattr(getattr(view_func, "cls", None), "parser_classes", None)
        if length == 0 or not parser_classes or not request.content_type:
            return None
        if not media_type_matches("application/json", request.content_type):
            return None
        if all(issubclass(p, LimitedJSONParser) for p in parser_classes):
            max_bytes = settings.LANGBOT_API_BODY_MAX_BYTES
            if length > max_bytes:
                error = payload_too_large(max_bytes)
                return JsonResponse(error_body(error.error_code, str(error.detail), error.details), status=413)
        elif length > max(settings.LANGBOT_API_BODY_MAX_BYTES, settings.LANGBOT_MAX_EVENT_BYTES):
            # The view's own parser refuses it by its own cap, before reading it.
            return None
        raw = _body_read(request, length)
        max_depth = settings.LANGBOT_API_JSON_MAX_DEPTH
        where = json_too_deep(raw, max_depth)
        if where is not None:
            details = {"fields": {where: too_deep_message(max_depth)}}
            return JsonResponse(error_body("invalid_argument", "The request has invalid fields.", details), status=400)
        return None


def _is_chunked(request: HttpRequest) -> bool:
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def _chunked_length_set(request: HttpRequest) -> bool:
    """Set Content-Length from the body the server has received whole (the ASGI handler spools it to a
    seekable file before Django sees the request); False where the body is a stream of unknown length."""
    stream = getattr(request, "_stream", None)
    if stream is None or not hasattr(stream, "seekable") or not stream.seekable():
        return False
    start = stream.tell()
    size = stream.seek(0, 2) - start
    stream.seek(start)
    request.META["CONTENT_LENGTH"] = str(size)
    return True


def _body_read(request: HttpRequest, length: int) -> bytes:
    """The body, read once and kept where `HttpRequest.body` keeps it, so parsers read it again. Not
    through `.body` itself: its DATA_UPLOAD_MAX_MEMORY_SIZE check would answer a bare 400 for a body our
    own caps allow."""
    body: bytes | None = getattr(request, "_body", None)
    if body is None:
        body = request.read(length)
        request._body = body
        request._stream = io.BytesIO(body)
    return body


def _refused(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    if is_api_request(request):
        return JsonResponse(error_body(code, message), status=status)
    return HttpResponse(f"{message}\n", status=status, content_type="text/plain; charset=utf-8")
