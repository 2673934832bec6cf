"""REST endpoints of human takeover (README "Human takeover"): `POST /api/v1/conversations/{id}/takeover`,
`.../release`, `.../messages` (the operator's reply) and `GET /api/v1/handoffs` (the inbox).

Scoped to the caller's workspace: a conversation the workspace has no event in — another workspace's
included — answers 404 `not_found`. Releasing or replying in a conversation nobody holds answers 409
`takeover.not_held`; a reply the platform refused answers 502 `delivery.failed` (nothing recorded).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import ApiError, invalid_fields
from foundation.api_input import body_parse
from runners.actions.delivery import MESSAGE_MAX_CHARS, DeliveryError
from runners.actions.operator import operator_item_out, operator_reply
from runners.takeover.services import (
    REASON_MAX,
    ConversationNotFoundError,
    ConversationNotHeldError,
    conversation_release,
    conversation_takeover,
    handoffs_waiting,
    hold_out,
)

INBOX_LIMIT = 200


class TakeoverIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=REASON_MAX)


class OperatorMessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MESSAGE_MAX_CHARS)


class HoldOut(BaseModel):
    conversation_id: str
    status: Literal["requested", "held", "released"]
    held_by: str | None
    reason: str
    bot_id: str | None
    requested_by_run: str | None = Field(description="The run whose `handoff` action asked for a human.")
    requested_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    ended_by: str | None


class HandoffPageOut(BaseModel):
    items: list[HoldOut] = Field(description="Conversations waiting for a human, oldest request first.")


class OperatorMessageOut(BaseModel):
    message_id: str
    role: Literal["assistant"]
    content: str
    operator: str
    created_at: datetime
    platform_message: dict[str, Any] = Field(description="The platform's ids of the sent message ({} on web/API).")


_NOT_FOUND = OpenApiResponse(description="`not_found`: the workspace has no such conversation")
_NOT_HELD = OpenApiResponse(description="`takeover.not_held`: nobody holds the conversation")


def _operator(request: Request) -> str:
    user = request.user
    return user.get_username() if hasattr(user, "get_username") else str(user)


def _not_found(conversation_id: str) -> ApiError:
    return ApiError(404, "not_found", f"No conversation {conversation_id!r} in this workspace.")


def _not_held(conversation_id: str) -> ApiError:
    return ApiError(409, "takeover.not_held", f"Nobody holds conversation {conversation_id!r}.")


class ConversationTakeoverApi(APIView):
    required_scopes = {"POST": "conversations:write"}

    @extend_schema(
        operation_id="conversations_takeover",
        parameters=[WORKSPACE_PARAMETER],
        request=TakeoverIn,
        responses={200: HoldOut, 404: _NOT_FOUND},
        description="Hold the conversation for the caller: until it is released its new messages are recorded "
        "and shown to operators but start no run. A conversation waiting in the inbox is taken from it; one "
        "already held is answered as it is (`held_by` says who).",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(TakeoverIn, request.data or {})
        try:
            hold = conversation_takeover(
                workspace_id=workspace.pk,
                conversation_id=conversation_id,
                operator=_operator(request),
                reason=spec.reason,
            )
        except ConversationNotFoundError:
            raise _not_found(conversation_id) from None
        return Response(hold_out(hold))


class ConversationReleaseApi(APIView):
    required_scopes = {"POST": "conversations:write"}

    @extend_schema(
        operation_id="conversations_release",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses={200: HoldOut, 404: _NOT_FOUND, 409: _NOT_HELD},
        description="Hand the conversation back to its bindings (or dismiss its waiting handoff request). The "
        "next run there is told in `metadata.human_takeover`.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        workspace = request_workspace(request)
        try:
            hold = conversation_release(
                workspace_id=workspace.pk, conversation_id=conversation_id, operator=_operator(request)
            )
        except ConversationNotHeldError:
            if not workspace.events.filter(conversation_id=conversation_id).exists():
                raise _not_found(conversation_id) from None
            raise _not_held(conversation_id) from None
        return Response(hold_out(hold))


class ConversationOperatorMessageApi(APIView):
    required_scopes = {"POST": "conversations:write"}

    @extend_schema(
        operation_id="conversations_operator_message",
        parameters=[WORKSPACE_PARAMETER],
        request=OperatorMessageIn,
        responses={
            201: OperatorMessageOut,
            404: _NOT_FOUND,
            409: _NOT_HELD,
            502: OpenApiResponse(description="`delivery.failed`: the platform refused it; nothing recorded"),
        },
        description="Reply in a conversation the workspace holds: sent through the conversation's platform "
        "(or the web chat) and recorded as an assistant turn whose actor is the operator.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        workspace = request_workspace(request)
        if not workspace.events.filter(conversation_id=conversation_id).exists():
            raise _not_found(conversation_id)
        spec = body_parse(OperatorMessageIn, request.data)
        if not spec.text.strip():
            raise invalid_fields({"text": "Must not be only white space."})
        try:
            reply = operator_reply(
                workspace_id=workspace.pk,
                conversation_id=conversation_id,
                operator=_operator(request),
                text=spec.text,
            )
        except ConversationNotHeldError:
            raise _not_held(conversation_id) from None
        except DeliveryError as exc:
            raise ApiError(502, "delivery.failed", str(exc)) from None
        body = {**operator_item_out(reply.item), "platform_message": reply.platform_message}
        body.pop("contents", None)
        body.pop("actor", None)
        return Response(body, status=status.HTTP_201_CREATED)


class HandoffListApi(APIView):
    required_scopes = {"GET": "conversations:read"}

    @extend_schema(
        operation_id="handoffs_list",
        parameters=[WORKSPACE_PARAMETER],
        responses=HandoffPageOut,
        description=f"The inbox: conversations whose runner asked for a human, oldest first (at most {INBOX_LIMIT}).",
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        waiting = handoffs_waiting(workspace_ids=[workspace.pk])[:INBOX_LIMIT]
        return Response({"items": [hold_out(hold) for hold in waiting]})
