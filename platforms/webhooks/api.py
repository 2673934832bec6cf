"""REST endpoints of the completion webhooks (docs/architecture.md, "The REST API"): `/api/v1/webhooks[/{webhook_id}]`,
`/api/v1/webhooks/{webhook_id}/rotate-secret`, `/api/v1/webhooks/{webhook_id}/deliveries` and
`.../deliveries/{delivery_id}/redeliver`.

Everything is scoped to the caller's workspace; another workspace's endpoint answers 404. The secret is in
the answer of the create and the rotation only; every other answer shows it masked.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import Workspace
from foundation.api_errors import ApiError, invalid_fields, query_int
from foundation.api_input import body_parse
from foundation.crypto import SECRET_MASK
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from platforms.webhooks.selectors import (
    webhook_delivery_get,
    webhook_delivery_page,
    webhook_endpoint_get,
    webhook_endpoint_list,
)
from platforms.webhooks.services import (
    webhook_delivery_redeliver,
    webhook_endpoint_create,
    webhook_endpoint_delete,
    webhook_endpoint_update,
    webhook_secret_rotate,
)
from platforms.webhooks.specs import SecretRotateIn, WebhookEndpointIn, WebhookEndpointPatchIn

_INVALID = OpenApiResponse(description="`invalid_argument` with details.fields")
DELIVERY_PAGE_DEFAULT, DELIVERY_PAGE_MAX = 50, 100


# --- output shapes (documentation and serialization) -------------------------------------------------


class WebhookEndpointOut(BaseModel):
    webhook_id: UUID
    url: str
    description: str
    event_types: list[str]
    binding_id: str | None
    enabled: bool
    secret: str = Field(description="`whsec_...` in the answer of a create or a rotation; `********` elsewhere.")
    previous_secret_expires_at: datetime | None = Field(
        description="Until when the secret before the last rotation still signs (a second signature)."
    )
    created_at: datetime
    updated_at: datetime


class WebhookEndpointListOut(BaseModel):
    items: list[WebhookEndpointOut]


class WebhookDeliveryOut(BaseModel):
    delivery_id: UUID
    seq: int = Field(description="Cursor of the log: pass it as `before` for the next (older) page.")
    event_id: str = Field(description="The `webhook-id` header: the same for every attempt and redelivery.")
    event_type: str
    run_id: UUID | None
    payload: dict[str, Any]
    status: str = Field(description="pending | succeeded | failed")
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_response: str = Field(description="The first 1,000 characters of the receiver's last answer.")
    last_error: str
    redelivery_of: UUID | None
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveryPageOut(BaseModel):
    items: list[WebhookDeliveryOut]
    has_more: bool


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def endpoint_out(endpoint: WebhookEndpoint, *, secret: str | None = None) -> dict[str, Any]:
    return {
        "webhook_id": str(endpoint.webhook_id),
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": list(endpoint.event_types),
        "binding_id": endpoint.binding.binding_id if endpoint.binding is not None else None,
        "enabled": endpoint.enabled,
        "secret": secret if secret is not None else SECRET_MASK,
        "previous_secret_expires_at": _iso(endpoint.previous_secret_expires_at),
        "created_at": endpoint.created_at.isoformat(),
        "updated_at": endpoint.updated_at.isoformat(),
    }


def delivery_out(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "delivery_id": str(delivery.delivery_id),
        "seq": delivery.pk,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "run_id": str(delivery.run_id) if delivery.run_id else None,
        "payload": delivery.payload,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": _iso(delivery.next_attempt_at),
        "last_attempt_at": _iso(delivery.last_attempt_at),
        "last_status_code": delivery.last_status_code,
        "last_response": delivery.last_response,
        "last_error": delivery.last_error,
        "redelivery_of": str(delivery.redelivery_of.delivery_id) if delivery.redelivery_of else None,
        "created_at": delivery.created_at.isoformat(),
        "delivered_at": _iso(delivery.delivered_at),
    }


def _endpoint_or_404(workspace: Workspace, webhook_id: str) -> WebhookEndpoint:
    endpoint = webhook_endpoint_get(workspace=workspace, webhook_id=webhook_id)
    if endpoint is None:
        raise ApiError(404, "not_found", f"No webhook {webhook_id!r} in this workspace.")
    return endpoint


# --- endpoints -----------------------------------------------------------------------------------------


class WebhookListApi(APIView):
    required_scopes = {"GET": "webhooks:read", "POST": "webhooks:write"}

    @extend_schema(operation_id="webhooks_list", parameters=[WORKSPACE_PARAMETER], responses=WebhookEndpointListOut)
    def get(self, request: Request) -> Response:
        endpoints = webhook_endpoint_list(workspace=request_workspace(request))
        return Response({"items": [endpoint_out(e) for e in endpoints]})

    @extend_schema(
        operation_id="webhooks_create",
        parameters=[WORKSPACE_PARAMETER],
        request=WebhookEndpointIn,
        responses={201: WebhookEndpointOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(WebhookEndpointIn, request.data)
        endpoint, secret = webhook_endpoint_create(workspace=workspace, spec=spec)
        return Response(endpoint_out(endpoint, secret=secret), status=status.HTTP_201_CREATED)


class WebhookDetailApi(APIView):
    required_scopes = {"GET": "webhooks:read", "PATCH": "webhooks:write", "DELETE": "webhooks:write"}

    @extend_schema(operation_id="webhooks_retrieve", parameters=[WORKSPACE_PARAMETER], responses=WebhookEndpointOut)
    def get(self, request: Request, webhook_id: str) -> Response:
        return Response(endpoint_out(_endpoint_or_404(request_workspace(request), webhook_id)))

    @extend_schema(
        operation_id="webhooks_update",
        parameters=[WORKSPACE_PARAMETER],
        request=WebhookEndpointPatchIn,
        responses={200: WebhookEndpointOut, 400: _INVALID},
    )
    def patch(self, request: Request, webhook_id: str) -> Response:
        endpoint = _endpoint_or_404(request_workspace(request), webhook_id)
        patch = body_parse(WebhookEndpointPatchIn, request.data)
        return Response(endpoint_out(webhook_endpoint_update(endpoint=endpoint, patch=patch)))

    @extend_schema(operation_id="webhooks_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, webhook_id: str) -> Response:
        webhook_endpoint_delete(endpoint=_endpoint_or_404(request_workspace(request), webhook_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookSecretRotateApi(APIView):
    required_scopes = {"POST": "webhooks:write"}

    @extend_schema(
        operation_id="webhooks_rotate_secret",
        parameters=[WORKSPACE_PARAMETER],
        request=SecretRotateIn,
        responses={200: WebhookEndpointOut, 400: _INVALID},
    )
    def post(self, request: Request, webhook_id: str) -> Response:
        endpoint = _endpoint_or_404(request_workspace(request), webhook_id)
        spec = body_parse(SecretRotateIn, request.data if request.data else {})
        endpoint, secret = webhook_secret_rotate(
            endpoint=endpoint, grace_seconds=spec.grace_seconds, secret=spec.secret
        )
        return Response(endpoint_out(endpoint, secret=secret))


# --- deliveries ----------------------------------------------------------------------------------------


class WebhookDeliveryListApi(APIView):
    required_scopes = {"GET": "webhooks:read"}

    @extend_schema(
        operation_id="webhooks_deliveries_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("status", OpenApiTypes.STR, enum=["pending", "succeeded", "failed"]),
            OpenApiParameter("before", OpenApiTypes.INT, description="A delivery's `seq`: older deliveries only."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1-{DELIVERY_PAGE_MAX}, default 50."),
        ],
        responses={200: WebhookDeliveryPageOut, 400: _INVALID},
    )
    def get(self, request: Request, webhook_id: str) -> Response:
        endpoint = _endpoint_or_404(request_workspace(request), webhook_id)
        wanted = request.query_params.get("status") or None
        if wanted is not None and wanted not in WebhookDelivery.Status.values:
            raise invalid_fields({"status": "Must be pending, succeeded or failed."})
        before = query_int(request.query_params, "before", default=None, low=1)
        limit = query_int(request.query_params, "limit", default=DELIVERY_PAGE_DEFAULT, low=1, high=DELIVERY_PAGE_MAX)
        items, more = webhook_delivery_page(endpoint=endpoint, status=wanted, before=before, limit=limit)
        return Response({"items": [delivery_out(d) for d in items], "has_more": more})


class WebhookRedeliverApi(APIView):
    required_scopes = {"POST": "webhooks:write"}

    @extend_schema(
        operation_id="webhooks_deliveries_redeliver",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses={
            202: WebhookDeliveryOut,
            409: OpenApiResponse(description="`failed_precondition`: the webhook is disabled"),
        },
    )
    def post(self, request: Request, webhook_id: str, delivery_id: str) -> Response:
        endpoint = _endpoint_or_404(request_workspace(request), webhook_id)
        delivery = webhook_delivery_get(endpoint=endpoint, delivery_id=delivery_id)
        if delivery is None:
            raise ApiError(404, "not_found", f"No delivery {delivery_id!r} of this webhook.")
        if not endpoint.enabled:
            raise ApiError(409, "failed_precondition", "The webhook is disabled: enable it to redeliver.")
        return Response(delivery_out(webhook_delivery_redeliver(delivery=delivery)), status=status.HTTP_202_ACCEPTED)
