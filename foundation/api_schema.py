"""The OpenAPI schema of the REST API: drf-spectacular's schema class plus the error answers every view
can give, and a postprocessing hook for the one operation the generator cannot see (the SSE run stream).

Views declare their successful answers and the errors peculiar to them (409 `run.finished`, 413
`payload_too_large`, ...). The errors any operation can give come from shared code — authentication,
the workspace choice (`bindings.access`), parsing and `api_errors.exception_handler` — so they are
added here, with the one error body (docs/architecture.md, "The REST API"), instead of being repeated on every view.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ApiErrorSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Machine-readable, e.g. `invalid_argument`, `not_found`.")
    message = serializers.CharField()
    details = serializers.DictField(help_text="For `invalid_argument`: `fields`, dotted path → message.")


class ApiErrorResponseSerializer(serializers.Serializer[Any]):
    error = ApiErrorSerializer()


_ANY_OPERATION = {
    "401": "`unauthenticated`: no valid API key or session",
    "403": "`forbidden`",
    "429": "`rate_limited`: over the API key's request rate (`LANGBOT_API_THROTTLE_RATE`); retry after `Retry-After` "
    "seconds",
    "503": "`unavailable`: the server has no database connection right now; retry after `Retry-After` seconds",
}
_WITH_INPUT = {"400": "`invalid_argument` (the fields are named in `details.fields`), or `invalid_json`"}
_WITH_BODY = {"415": "`unsupported_media_type`: the body is not of a media type the operation takes"}
_WITH_LOOKUP = {"404": "`not_found`: no such object, or no such workspace of the caller's"}


class ApiAutoSchema(AutoSchema):
    def _get_parameters(self) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super()._get_parameters()
        for parameter in parameters:
            if parameter["in"] == "query" and not parameter.get("required"):
                # Every view reads an empty optional query parameter as an absent one (DRF's reading too).
                parameter["allowEmptyValue"] = True
        return parameters

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        errors = dict(_ANY_OPERATION)
        parameters = {(p["name"], p["in"]) for p in self._get_parameters()}
        has_body = self.method in {"POST", "PUT", "PATCH"} and bool(self._get_request_body())
        if parameters or has_body:
            errors.update(_WITH_INPUT)
        if has_body:
            errors.update(_WITH_BODY)
        if "{" in self.path or ("workspace", "query") in parameters:
            errors.update(_WITH_LOOKUP)
        for code, described in responses.items():
            # An error a view declares by description only gets the error body too.
            if code >= "400" and "content" not in described:
                errors[code] = described.get("description") or errors.get(code, "")
        for code, description in errors.items():
            if code in responses and "content" in responses[code]:
                continue
            responses[code] = self._get_response_for_code(
                OpenApiResponse(ApiErrorResponseSerializer, description=description), code, direction=direction
            )
        return dict(sorted(responses.items()))


RUN_STREAM_PATH = "/api/v1/runs/{run_id}/stream"
_RUN_DETAIL_PATH = "/api/v1/runs/{run_id}"
_SEQ = {"type": "integer", "minimum": 0}
# One event of the stream, as Open API before 3.2 reads the schema of `text/event-stream`.
_SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "description": "The result type (`message.delta`, ...) or `run.status`."},
        "data": {"type": "string", "description": "JSON text; see the operation's description."},
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The result's seq; not on `run.status`."},
    },
}
_RUN_STREAM_DESCRIPTION = """One run's result events as Server-Sent Events, until the run ends.

Each result is one event: `id:` is its `seq`, `event:` its type (`message.delta`, `run.completed`, ...)
and `data:` the JSON `{"id", "run_id", "seq", "type", "data"}`. Status changes come as `event: run.status`
without an `id:`, with `data:` `{"run_id", "status", "status_reason"}`. The stream first replays the
persisted events after the given seq, then forwards live ones, sends `: ping` comments while it waits,
and ends after `run.completed`/`run.failed` (or the run's terminal `run.status` when it ended without one).

A reconnecting `EventSource` sends `Last-Event-ID`; other clients pass `?after_seq=`. When both are
given, the header wins."""


def run_stream_document(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: `GET /api/v1/runs/{run_id}/stream` (`runners.lifecycle.sse.run_stream`).

    The SSE view is a plain async Django view (DRF has no streaming async views), so the generator does
    not see it. It takes the run detail operation's authentication, `run_id` and `workspace`, and answers
    errors with the same body, so its description is built from that operation.
    """
    paths = result["paths"]
    detail = paths[_RUN_DETAIL_PATH]["get"]
    errors = {code: detail["responses"][code] for code in ("401", "403", "404", "503")}
    paths[RUN_STREAM_PATH] = {
        "get": {
            "operationId": "runs_stream",
            "summary": "Stream a run's result events (SSE)",
            "description": _RUN_STREAM_DESCRIPTION,
            "tags": detail.get("tags", []),
            "security": detail.get("security", []),
            "parameters": [
                *detail["parameters"],
                {
                    "in": "query",
                    "name": "after_seq",
                    "schema": _SEQ,
                    "allowEmptyValue": True,
                    "description": "Replay only the events after this seq (default 0: all of them).",
                },
                {
                    "in": "header",
                    "name": "Last-Event-ID",
                    "schema": _SEQ,
                    "required": False,
                    "description": "The seq of the last event received; sent by a reconnecting EventSource.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The event stream.",
                    "content": {"text/event-stream": {"schema": _SSE_EVENT}},
                },
                "400": {
                    "description": "`invalid_argument`: `after_seq` or `Last-Event-ID` is not a seq (an integer ≥ 0)",
                    "content": errors["404"]["content"],
                },
                **errors,
            },
        }
    }
    return result
