"""Which workspace a REST request acts in (docs/architecture.md, "The REST API"), and whether it may act beyond it.
Views of every app call `request_workspace`; host-wide operations call `require_operator`.

Kept apart from `bindings.authentication`, which DRF imports while it is still initialising.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.request import Request

from bindings.authentication import ApiKeyPrincipal
from bindings.models import Workspace
from bindings.selectors import WorkspaceChoiceError, workspace_for_user
from foundation.api_errors import ApiError


def request_workspace(request: Request) -> Workspace:
    """An API key acts in its own workspace. A session user acts in their only workspace, or in the one
    named by `?workspace=<slug>` (required when they belong to several; superusers may name any)."""
    user = request.user
    if isinstance(user, ApiKeyPrincipal):
        return user.workspace
    if user is None or not user.is_authenticated:
        raise exceptions.NotAuthenticated()
    # Asked twice per request (the role check in bindings.roles, then the view): the choice is made once.
    chosen: Workspace | None = getattr(request, "_langbot_workspace", None)
    if chosen is not None:
        return chosen
    try:
        chosen = workspace_for_user(user=user, requested_slug=request.query_params.get("workspace") or None)
    except WorkspaceChoiceError as exc:
        details = {"fields": {"workspace": exc.message}} if exc.status == 400 else None
        raise ApiError(exc.status, exc.code, exc.message, details) from None
    request._langbot_workspace = chosen  # type: ignore[attr-defined]
    return chosen


def require_operator(request: Request) -> None:
    """Host-wide operations (refreshing the runner catalog) act beyond the caller's workspace: they are for
    operators, i.e. an API key with the operator scope or a staff member's session (who may do the same in
    admin). Anyone else gets 403 `forbidden`."""
    user = request.user
    if user is None or not user.is_authenticated:
        raise exceptions.NotAuthenticated()
    staff = bool(user.is_active and user.is_staff)
    if not (user.api_key.is_operator if isinstance(user, ApiKeyPrincipal) else staff):
        raise ApiError(
            403,
            "forbidden",
            "This operation is for operators: an API key with the operator scope or a staff session.",
            {"required_scope": "operator"},
        )
