"""Input refused before any view sees it: text the database cannot store (`storable`); and `body_parse`,
the strict parse of a JSON body by a pydantic input model that every API view uses.

Such text reaching a query would fail the request with a database error, i.e. a 500. The API's JSON and
multipart parsers answer 400 `invalid_argument` naming the field instead, and `StorableTextMiddleware`
does the same for the path and query string of every request (plain text outside `/api/`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from pydantic import BaseModel, ValidationError
from rest_framework import parsers

from foundation.api_errors import ApiError, error_body, field_errors, invalid_fields, is_api_request
from foundation.limits import LimitedJSONParser
from foundation.storable import UNSTORABLE_MESSAGE, is_storable, unstorable_text_path


def refuse_unstorable_text(data: Any) -> Any:
    """`data` unchanged, or a 400 naming where it holds text the database cannot store."""
    where = unstorable_text_path(data)
    if where is not None:
        raise invalid_fields({where or "(body)": UNSTORABLE_MESSAGE})
    return data


class JSONParser(LimitedJSONParser):
    """The API's JSON parser: the request limits' parser (size and depth, `foundation.limits`), refusing
    text the database cannot store as well."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        return refuse_unstorable_text(super().parse(stream, media_type, parser_context))


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refusing form fields and file names the database cannot store."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        fields = {name: values[0] if len(values) == 1 else values for name, values in parsed.data.lists()}
        refuse_unstorable_text(fields)
        for name, uploads in parsed.files.lists():
            if any(upload.name and not is_storable(upload.name) for upload in uploads):
                raise invalid_fields({name: f"The file name: {UNSTORABLE_MESSAGE}"})
        return parsed


class StorableTextMiddleware:
    """A 400 for a request whose path or query string holds text the database cannot store: in the
    API's error shape under `/api/`, as plain text elsewhere (the debug chat's `?workspace=`, the admin's
    filters), where such a value would otherwise reach a query and fail it with a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        field = _unstorable_field(request)
        if field is None:
            return self.get_response(request)
        if is_api_request(request):
            body = error_body(
                "invalid_argument", "The request has invalid fields.", {"fields": {field: UNSTORABLE_MESSAGE}}
            )
            return JsonResponse(body, status=400)
        return HttpResponseBadRequest(f"{field}: {UNSTORABLE_MESSAGE}", content_type="text/plain; charset=utf-8")


def _unstorable_field(request: HttpRequest) -> str | None:
    if not is_storable(request.path):
        return "(path)"
    for name, values in request.GET.lists():
        if not is_storable(name) or not all(is_storable(v) for v in values):
            return name
    return None


InputModel = TypeVar("InputModel", bound=BaseModel)


def body_parse(model: type[InputModel], data: Any) -> InputModel:
    """A request body parsed strictly by a pydantic input model: JSON's own types, as the schema documents
    them (`0` is not a boolean, `"5"` not an integer); a bad field answers 400 `invalid_argument` naming it."""
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_argument", "The body must be a JSON object.", {"fields": {}})
    try:
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise invalid_fields(field_errors(exc)) from None
