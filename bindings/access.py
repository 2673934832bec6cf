"""Which workspace a REST request acts in (DESIGN §3.2). Views of every app call `request_workspace`.

Kept apart from `bindings.authentication`, which DRF imports while it is still initialising.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.request import Request

from bindings.authentication import ApiKeyPrincipal
from bindings.models import Workspace
from bindings.selectors import WorkspaceChoiceError, workspace_for_user
from langbot_host.core.api_errors import ApiError


def request_workspace(request: Request) -> Workspace:
    """An API key acts in its own workspace. A session user acts in their only workspace, or in the one
    named by `?workspace=<slug>` (required when they belong to several; superusers may name any)."""
    user = request.user
    if isinstance(user, ApiKeyPrincipal):
        return user.workspace
    if user is None or not user.is_authenticated:
        raise exceptions.NotAuthenticated()
    try:
        return workspace_for_user(user=user, requested_slug=request.query_params.get("workspace") or None)
    except WorkspaceChoiceError as exc:
        details = {"fields": {"workspace": exc.message}} if exc.status == 400 else None
        raise ApiError(exc.status, exc.code, exc.message, details) from None
