"""The one JSON error shape of the REST API: `{"error": {"code", "message", "details"}}` (docs/architecture.md, "The
REST API").

Views raise `ApiError` (or a DRF exception); this module turns either into that shape with a stable,
machine-readable code, so no client ever has to parse a message.

A request that could not get a database connection (the pool is exhausted, or the server refuses: too
many clients, down, restarting) is not a server error: it answers 503 `unavailable` with `Retry-After`,
whether it failed in authentication, the view or a middleware — the DRF handler catches it in API
views, `DatabaseUnavailableMiddleware` in other views (non-API pages get a plain-text 503) and
`handler500` in middleware.
"""

import logging
import sys
from typing import Any, overload

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults
from pydantic import ValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response

from foundation.db_unavailable import database_unavailable

logger = logging.getLogger(__name__)

# What a client is told to wait before retrying a request refused for want of a database connection.
RETRY_AFTER_SECONDS = 5


class FieldsRefusedError(Exception):
    """A write refused for field-level reasons, `{"dotted.field": message}`. A view that lets it through
    answers 400 `invalid_argument` naming the fields (the exception handler does it); a view that means
    another status (a 409 for an object in use) catches it and says so. A subclass may answer a more
    precise code than `invalid_argument` (`address.not_allowed`), still naming the fields."""

    code = "invalid_argument"

    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields


class ApiError(exceptions.APIException):
    """An API failure with an explicit code, e.g. `ApiError(503, "runtime.unavailable", "...")`."""

    def __init__(self, status_code: int, code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.error_code = code
        self.details = details or {}


_CODES_BY_EXCEPTION: list[tuple[type[Exception], str]] = [
    (exceptions.ParseError, "invalid_json"),
    (exceptions.ValidationError, "invalid_argument"),
    (exceptions.NotAuthenticated, "unauthenticated"),
    (exceptions.AuthenticationFailed, "unauthenticated"),
    (exceptions.PermissionDenied, "forbidden"),
    (exceptions.NotFound, "not_found"),
    (exceptions.MethodNotAllowed, "method_not_allowed"),
    (exceptions.NotAcceptable, "not_acceptable"),
    (exceptions.UnsupportedMediaType, "unsupported_media_type"),
    (exceptions.Throttled, "rate_limited"),
]


def invalid_fields(fields: dict[str, str]) -> ApiError:
    """A 400 `invalid_argument` naming each bad field (dotted path → message), as every view answers."""
    return ApiError(400, "invalid_argument", "The request has invalid fields.", {"fields": fields})


@overload
def query_int(query: QueryDict, name: str, *, default: int, low: int, high: int | None = None) -> int: ...
@overload
def query_int(query: QueryDict, name: str, *, default: None, low: int, high: int | None = None) -> int | None: ...
def query_int(query: QueryDict, name: str, *, default: int | None, low: int, high: int | None = None) -> int | None:
    """An integer query parameter within [low, high], `default` when absent; a 400 naming it otherwise."""
    value = query.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise invalid_fields({name: "Must be an integer."}) from None
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise invalid_fields({name: f"Must be {bound}."})
    return number


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def query_bool(query: QueryDict, name: str) -> bool | None:
    """A boolean query parameter (`true`/`false`, `1`/`0`, `yes`/`no`), None when absent; a 400 naming
    it otherwise, so that a typo never silently selects the opposite."""
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        return _BOOLEANS[value.lower()]
    except KeyError:
        raise invalid_fields({name: "Must be true or false."}) from None


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def unavailable_body() -> dict[str, Any]:
    """The error body of a request refused because it could not get a database connection."""
    return error_body(
        "unavailable",
        "The server has no database connection right now; retry shortly.",
        {"retry_after_seconds": RETRY_AFTER_SECONDS},
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    # Imported here: `rest_framework.views` reads the parser setting at import, and that parser
    # (`api_input.JSONParser`) raises this module's errors.
    from rest_framework.views import exception_handler as drf_exception_handler

    if database_unavailable(exc):
        _log_unavailable(exc)
        return Response(
            unavailable_body(),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, FieldsRefusedError):
        refused = invalid_fields(exc.fields)
        refused.error_code = exc.code
        exc = refused
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, ApiError):
        body = error_body(exc.error_code, str(exc.detail), exc.details)
    elif isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = error_body("invalid_argument", "The request has invalid fields.", {"fields": fields})
    else:
        code = next((c for cls, c in _CODES_BY_EXCEPTION if isinstance(exc, cls)), "error")
        body = error_body(code, str(exc.detail))
    if response.status_code == status.HTTP_401_UNAUTHORIZED and "WWW-Authenticate" not in response:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    response.data = body
    return response


def is_api_request(request: HttpRequest) -> bool:
    # `path_info`: without the prefix of a deployment under a sub-path (SCRIPT_NAME).
    return request.path_info.startswith("/api/")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """`handler404`: a URL under `/api/` that matches no route (a malformed id, say) answers in the API's
    error shape; other pages keep Django's."""
    if is_api_request(request):
        return JsonResponse(error_body("not_found", "No such resource."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """`handler500`: an API client gets the API's error shape; the exception itself is logged by Django.

    Django calls it while handling the exception (in the async handler too: asgiref re-raises it in the
    thread it hands the call to), so `sys.exc_info()` tells a lack of database connections from a bug.
    """
    exc = sys.exc_info()[1]
    if exc is not None and database_unavailable(exc):
        return _unavailable(request)
    if is_api_request(request):
        return JsonResponse(error_body("internal", "The server could not answer; the error is logged."), status=500)
    return defaults.server_error(request)


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """Answers a view (admin, chat pages) that could not get a database connection with a 503, logged
    as one warning: through `handler500`, Django would log each one as an error with its traceback."""

    # Synchronous only, on purpose. It is the innermost middleware, and under ASGI Django picks each
    # middleware's mode from the one inside it: async-capable here made CSRF, auth, messages and
    # X-Frame-Options async too, and each then ran its process_request/process_view/process_response as
    # a thread hand-off of its own (`python -m bench asgi_cost`; bench/README.md). Sync, the whole chain
    # runs on the request's one thread. `process_exception` is called the same way in either mode.
    async_capable = False
    sync_capable = True

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_unavailable(exception):
            return None
        _log_unavailable(exception)
        return _unavailable(request)


def _unavailable(request: HttpRequest) -> HttpResponse:
    response: HttpResponse
    if is_api_request(request):
        response = JsonResponse(unavailable_body(), status=503)
    else:
        response = HttpResponse(
            "503 Service Unavailable: the server is busy; retry shortly.\n", status=503, content_type="text/plain"
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _log_unavailable(exc: BaseException) -> None:
    # A warning without the traceback: under overload every refused request would otherwise log one.
    logger.warning("request refused with 503: no database connection to be had (%s)", exc)


def field_errors(exc: ValidationError, prefix: str = "") -> dict[str, str]:
    """Pydantic errors as `{"dotted.field": message}`, first message per field."""
    fields: dict[str, str] = {}
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc or "non_field_errors")
        message = "Unknown field." if error["type"] == "extra_forbidden" else error["msg"]
        fields.setdefault(key, message.removeprefix("Value error, "))
    return fields
