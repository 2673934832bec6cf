"""REST endpoints for bots and bindings (docs/architecture.md, "The REST API"): `/api/v1/bots[/{bot_id}]`,
`/api/v1/bindings[/{binding_id}]`.

Everything is scoped to the caller's workspace; another workspace's object answers 404. Bodies are
parsed by the strict pydantic models of `bindings.specs`; validation errors answer 400
`invalid_argument` with `details.fields` = `{"dotted.field": message}`. Secrets are never returned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.models import AgentBinding, Bot, Workspace
from bindings.policies import ConcurrencyPolicy, DeliveryPolicy, ResourcePolicy, StatePolicy
from bindings.selectors import (
    binding_get,
    binding_list,
    binding_runner_config_masked,
    bot_credentials_masked,
    bot_get,
    bot_list,
)
from bindings.services import (
    BindingValidationError,
    binding_create,
    binding_delete,
    binding_update,
    bot_create,
    bot_delete,
    bot_update,
)
from bindings.specs import BindingIn, BindingPatchIn, BotIn, BotPatchIn
from bindings.triggers import TriggerPolicy
from foundation.api_errors import ApiError, query_bool
from foundation.api_input import body_parse

WORKSPACE_PARAMETER = OpenApiParameter(
    "workspace",
    OpenApiTypes.STR,
    description="Workspace slug; needed only for a session user who belongs to several workspaces.",
)


# --- output shapes (documentation and serialization) -------------------------------------------------


class BindingScopeOut(BaseModel):
    scope_type: Literal["global", "workspace", "bot"]
    scope_id: str | None


class BindingOut(BaseModel):
    binding_id: str
    name: str
    workspace: str | None
    scope: BindingScopeOut
    event_types: list[str]
    runner_id: str
    runner_config: dict[str, Any] = Field(description="Secret values are shown as `********`.")
    config_validated: bool = Field(
        description="False when the config was stored without checking it against the runner's schema."
    )
    resource_policy: ResourcePolicy
    state_policy: StatePolicy
    delivery_policy: DeliveryPolicy
    trigger_policy: TriggerPolicy
    concurrency_policy: ConcurrencyPolicy
    merge_window_seconds: float = Field(
        description="Under `merge`: seconds of quiet after a message before the merged run starts."
    )
    timeout_seconds: int
    priority: int
    enabled: bool
    source: str
    created_at: datetime
    updated_at: datetime


class BindingListOut(BaseModel):
    items: list[BindingOut]


class BotOut(BaseModel):
    bot_id: str
    name: str
    platform: str
    credentials: dict[str, str] = Field(description="Every value is shown as `********`.")
    allowed_origins: list[str] = Field(
        description="Web bots only: the websites (scheme://host[:port]) whose pages may embed the chat widget; "
        "empty for other bots."
    )
    enabled: bool
    created_at: datetime
    updated_at: datetime


class BotListOut(BaseModel):
    items: list[BotOut]


def binding_out(binding: AgentBinding) -> dict[str, Any]:
    return {
        "binding_id": binding.binding_id,
        "name": binding.name,
        "workspace": binding.workspace.slug if binding.workspace else None,
        "scope": {"scope_type": binding.scope_type, "scope_id": binding.scope_id or None},
        "event_types": binding.event_types,
        "runner_id": binding.runner_id,
        "runner_config": binding_runner_config_masked(binding),
        "config_validated": binding.config_validated,
        "resource_policy": ResourcePolicy.model_validate(binding.resource_policy).model_dump(mode="json"),
        "state_policy": StatePolicy.model_validate(binding.state_policy).model_dump(mode="json"),
        "delivery_policy": DeliveryPolicy.model_validate(binding.delivery_policy).model_dump(mode="json"),
        "trigger_policy": TriggerPolicy.model_validate(binding.trigger_policy).model_dump(mode="json"),
        "concurrency_policy": binding.concurrency_policy,
        "merge_window_seconds": binding.merge_window_seconds,
        "timeout_seconds": binding.timeout_seconds,
        "priority": binding.priority,
        "enabled": binding.enabled,
        "source": binding.source,
        "created_at": binding.created_at.isoformat(),
        "updated_at": binding.updated_at.isoformat(),
    }


def bot_out(bot: Bot) -> dict[str, Any]:
    return {
        "bot_id": bot.bot_id,
        "name": bot.name,
        "platform": bot.platform,
        "credentials": bot_credentials_masked(bot),
        "allowed_origins": list(bot.allowed_origins or []),
        "enabled": bot.enabled,
        "created_at": bot.created_at.isoformat(),
        "updated_at": bot.updated_at.isoformat(),
    }


# --- helpers -----------------------------------------------------------------------------------------


def _binding_or_404(workspace: Workspace, binding_id: str) -> AgentBinding:
    binding = binding_get(workspace=workspace, binding_id=binding_id)
    if binding is None:
        raise ApiError(404, "not_found", f"No binding {binding_id!r} in this workspace.")
    return binding


def _bot_or_404(workspace: Workspace, bot_id: str) -> Bot:
    bot = bot_get(workspace=workspace, bot_id=bot_id)
    if bot is None:
        raise ApiError(404, "not_found", f"No bot {bot_id!r} in this workspace.")
    return bot


# --- bindings ----------------------------------------------------------------------------------------


class BindingListApi(APIView):
    required_scopes = {"GET": "bindings:read", "POST": "bindings:write"}

    @extend_schema(
        operation_id="bindings_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("enabled", OpenApiTypes.BOOL),
            OpenApiParameter("runner_id", OpenApiTypes.STR),
        ],
        responses=BindingListOut,
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        bindings = binding_list(
            workspace=workspace,
            enabled=query_bool(request.query_params, "enabled"),
            runner_id=request.query_params.get("runner_id") or None,
        )
        return Response({"items": [binding_out(b) for b in bindings]})

    @extend_schema(
        operation_id="bindings_create",
        parameters=[WORKSPACE_PARAMETER],
        request=BindingIn,
        responses={201: BindingOut, 400: OpenApiResponse(description="`invalid_argument` with details.fields")},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(BindingIn, request.data)
        binding = binding_create(workspace=workspace, spec=spec)
        return Response(binding_out(binding), status=status.HTTP_201_CREATED)


class BindingDetailApi(APIView):
    required_scopes = {"GET": "bindings:read", "PATCH": "bindings:write", "DELETE": "bindings:write"}

    @extend_schema(operation_id="bindings_retrieve", parameters=[WORKSPACE_PARAMETER], responses=BindingOut)
    def get(self, request: Request, binding_id: str) -> Response:
        return Response(binding_out(_binding_or_404(request_workspace(request), binding_id)))

    @extend_schema(
        operation_id="bindings_update",
        parameters=[WORKSPACE_PARAMETER],
        request=BindingPatchIn,
        responses={200: BindingOut, 400: OpenApiResponse(description="`invalid_argument` with details.fields")},
    )
    def patch(self, request: Request, binding_id: str) -> Response:
        binding = _binding_or_404(request_workspace(request), binding_id)
        patch = body_parse(BindingPatchIn, request.data)
        binding = binding_update(binding=binding, patch=patch)
        return Response(binding_out(binding))

    @extend_schema(operation_id="bindings_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, binding_id: str) -> Response:
        binding_delete(binding=_binding_or_404(request_workspace(request), binding_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- bots --------------------------------------------------------------------------------------------


BOT_SAVE_REFUSED = OpenApiResponse(
    description="`invalid_argument` with details.fields (a credential the platform's schema refuses is "
    "`credentials.<key>`: missing, of the wrong shape, or Lark's verification_token/encrypt_key when neither "
    "is given), or `platform.unsupported` (details.fields.platform) when no adapter on this host serves the "
    "platform"
)


class BotListApi(APIView):
    required_scopes = {"GET": "bots:read", "POST": "bots:write"}

    @extend_schema(operation_id="bots_list", parameters=[WORKSPACE_PARAMETER], responses=BotListOut)
    def get(self, request: Request) -> Response:
        return Response({"items": [bot_out(b) for b in bot_list(workspace=request_workspace(request))]})

    @extend_schema(
        operation_id="bots_create",
        parameters=[WORKSPACE_PARAMETER],
        request=BotIn,
        responses={201: BotOut, 400: BOT_SAVE_REFUSED},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(BotIn, request.data)
        bot = bot_create(workspace=workspace, spec=spec)
        return Response(bot_out(bot), status=status.HTTP_201_CREATED)


class BotDetailApi(APIView):
    required_scopes = {"GET": "bots:read", "PATCH": "bots:write", "DELETE": "bots:write"}

    @extend_schema(operation_id="bots_retrieve", parameters=[WORKSPACE_PARAMETER], responses=BotOut)
    def get(self, request: Request, bot_id: str) -> Response:
        return Response(bot_out(_bot_or_404(request_workspace(request), bot_id)))

    @extend_schema(
        operation_id="bots_update",
        parameters=[WORKSPACE_PARAMETER],
        request=BotPatchIn,
        responses={200: BotOut, 400: BOT_SAVE_REFUSED},
    )
    def patch(self, request: Request, bot_id: str) -> Response:
        bot = _bot_or_404(request_workspace(request), bot_id)
        patch = body_parse(BotPatchIn, request.data)
        bot = bot_update(bot=bot, patch=patch)
        return Response(bot_out(bot))

    @extend_schema(
        operation_id="bots_destroy",
        parameters=[WORKSPACE_PARAMETER],
        responses={204: None, 409: OpenApiResponse(description="`failed_precondition`: bindings use the bot")},
    )
    def delete(self, request: Request, bot_id: str) -> Response:
        bot = _bot_or_404(request_workspace(request), bot_id)
        try:
            bot_delete(bot=bot)
        except BindingValidationError as exc:
            raise ApiError(
                409, "failed_precondition", "Bindings are scoped to this bot.", {"fields": exc.fields}
            ) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
