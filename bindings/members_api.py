"""REST endpoints for a workspace's members and their roles (docs/security.md, "Workspace roles and API-key
scopes"): `/api/v1/members[/{username}]` for admins and owners, and `/api/v1/membership`, the caller's own
place in the workspace (what it may do; leaving).

The rules (only owners grant or take the owner role, the last owner stays) are `bindings.roles`' services;
this module turns their refusals into the API's errors.
"""

from __future__ import annotations

from typing import Literal

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.authentication import ApiKeyPrincipal
from bindings.models import Workspace, WorkspaceMembership
from bindings.roles import (
    ANY_MEMBER,
    SCOPES,
    MemberRefusedError,
    member_add,
    member_remove,
    member_role_set,
    principal_role,
    role_reaches,
)
from foundation.api_errors import ApiError
from foundation.api_input import body_parse

RoleName = Literal["viewer", "operator", "developer", "admin", "owner"]


class MemberOut(BaseModel):
    username: str
    role: RoleName


class MemberListOut(BaseModel):
    items: list[MemberOut]


class MemberIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=150, description="An account of this host.")
    role: RoleName = "viewer"


class MemberPatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: RoleName


class MembershipOut(BaseModel):
    workspace: str
    kind: Literal["member", "api_key"]
    role: RoleName | None = Field(description="The member's role (owner for a superuser); none for an API key.")
    scopes: list[str] = Field(description="The scopes the caller may use in this workspace.")


def member_out(membership: WorkspaceMembership) -> dict[str, str]:
    return {"username": membership.user.get_username(), "role": membership.role}


def _member_or_404(workspace: Workspace, username: str) -> WorkspaceMembership:
    field = get_user_model().USERNAME_FIELD
    membership = (
        WorkspaceMembership.objects.select_related("user", "workspace")
        .filter(workspace=workspace, **{f"user__{field}": username})
        .first()
    )
    if membership is None:
        raise ApiError(404, "not_found", f"No member {username!r} in this workspace.")
    return membership


def _refused(exc: MemberRefusedError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message)


class MemberListApi(APIView):
    required_scopes = {"GET": "members:read", "POST": "members:write"}

    @extend_schema(operation_id="members_list", parameters=[WORKSPACE_PARAMETER], responses=MemberListOut)
    def get(self, request: Request) -> Response:
        memberships = (
            WorkspaceMembership.objects.select_related("user")
            .filter(workspace=request_workspace(request))
            .order_by("pk")
        )
        return Response({"items": [member_out(m) for m in memberships]})

    @extend_schema(
        operation_id="members_create",
        parameters=[WORKSPACE_PARAMETER],
        request=MemberIn,
        responses={
            201: MemberOut,
            403: OpenApiResponse(description="`forbidden`: only an owner grants the owner role"),
            404: OpenApiResponse(description="`not_found`: no such user on this host"),
            409: OpenApiResponse(description="`members.exists`: already a member"),
        },
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(MemberIn, request.data)
        try:
            membership = member_add(
                workspace=workspace,
                actor_role=principal_role(request, workspace) or "",
                username=spec.username,
                role=spec.role,
            )
        except MemberRefusedError as exc:
            raise _refused(exc) from None
        return Response(member_out(membership), status=status.HTTP_201_CREATED)


class MemberDetailApi(APIView):
    required_scopes = {"GET": "members:read", "PATCH": "members:write", "DELETE": "members:write"}

    @extend_schema(operation_id="members_retrieve", parameters=[WORKSPACE_PARAMETER], responses=MemberOut)
    def get(self, request: Request, username: str) -> Response:
        return Response(member_out(_member_or_404(request_workspace(request), username)))

    @extend_schema(
        operation_id="members_update",
        parameters=[WORKSPACE_PARAMETER],
        request=MemberPatchIn,
        responses={
            200: MemberOut,
            403: OpenApiResponse(description="`forbidden`: only an owner grants, changes or takes the owner role"),
            409: OpenApiResponse(description="`members.last_owner`: the last owner keeps the role"),
        },
    )
    def patch(self, request: Request, username: str) -> Response:
        workspace = request_workspace(request)
        membership = _member_or_404(workspace, username)
        spec = body_parse(MemberPatchIn, request.data)
        try:
            membership = member_role_set(
                membership=membership, actor_role=principal_role(request, workspace) or "", role=spec.role
            )
        except MemberRefusedError as exc:
            raise _refused(exc) from None
        return Response(member_out(membership))

    @extend_schema(
        operation_id="members_destroy",
        parameters=[WORKSPACE_PARAMETER],
        responses={
            204: None,
            403: OpenApiResponse(description="`forbidden`: only an owner removes an owner"),
            409: OpenApiResponse(description="`members.last_owner`: the last owner stays"),
        },
    )
    def delete(self, request: Request, username: str) -> Response:
        workspace = request_workspace(request)
        membership = _member_or_404(workspace, username)
        try:
            member_remove(membership=membership, actor_role=principal_role(request, workspace))
        except MemberRefusedError as exc:
            raise _refused(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class MembershipApi(APIView):
    """The caller's own place in the workspace: any member or key may read it; a member may leave."""

    required_scopes = {"GET": ANY_MEMBER, "DELETE": ANY_MEMBER}

    @extend_schema(operation_id="membership_retrieve", parameters=[WORKSPACE_PARAMETER], responses=MembershipOut)
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        if isinstance(request.user, ApiKeyPrincipal):
            granted = request.user.api_key.scopes or list(SCOPES)
            return Response({"workspace": workspace.slug, "kind": "api_key", "role": None, "scopes": granted})
        # A superuser who is no member acts as owner (bindings.roles.request_role_in).
        role = principal_role(request, workspace)
        scopes = [name for name, scope in SCOPES.items() if role_reaches(role, scope.role)]
        return Response({"workspace": workspace.slug, "kind": "member", "role": role, "scopes": scopes})

    @extend_schema(
        operation_id="membership_leave",
        parameters=[WORKSPACE_PARAMETER],
        responses={
            204: None,
            403: OpenApiResponse(description="`forbidden`: an API key is no member"),
            409: OpenApiResponse(description="`members.last_owner`: the last owner cannot leave"),
        },
    )
    def delete(self, request: Request) -> Response:
        workspace = request_workspace(request)
        if isinstance(request.user, ApiKeyPrincipal):
            raise ApiError(403, "forbidden", "An API key is not a member: revoke it instead.")
        membership = WorkspaceMembership.objects.filter(workspace=workspace, user_id=request.user.pk or 0).first()
        if membership is None:
            raise ApiError(404, "not_found", "You are not a member of this workspace.")
        try:
            member_remove(membership=membership, actor_role=membership.role, leaving=True)
        except MemberRefusedError as exc:
            raise _refused(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
