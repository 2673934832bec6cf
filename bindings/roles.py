"""Workspace roles and API-key scopes: what each role and scope may do, who holds which, and the one check
the REST API (`ScopePermission`) and the admin (`bindings.admin_scope`) both ask.

A person's role in a workspace is `WorkspaceMembership.role`. The roles are ranked — viewer, operator,
developer, admin, owner — and each may do what the ones below it may. Every REST operation and every admin
page names a *scope* (`runs:read`, `bindings:write`, ...); each scope has a least role. A session user may
use a scope when their role in the workspace they act in reaches its least role; an API key when the scope
is among its `scopes`, or when it has none (a key made before scopes, or on purpose: every scope of its
workspace). Superusers are the host's operators: every scope of every workspace.

The membership rules (who may grant or take which role, the last owner) are here too, as services, so the
REST API and the admin's member inline apply the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from bindings.access import request_workspace
from bindings.authentication import ApiKeyPrincipal
from bindings.models import Workspace, WorkspaceMembership
from foundation.api_errors import ApiError

Role = WorkspaceMembership.Role

ROLE_ORDER: tuple[str, ...] = (Role.VIEWER, Role.OPERATOR, Role.DEVELOPER, Role.ADMIN, Role.OWNER)
"""Least to most. A role may do everything the roles before it may."""

KEY_ROLE = Role.ADMIN
"""The most an API key stands for: acts only an owner may do (granting or taking the owner role) need an
owner's session, whatever the key's scopes."""


@dataclass(frozen=True)
class Scope:
    role: str
    """The least role that may use it."""
    description: str


SCOPES: dict[str, Scope] = {
    "events:read": Scope(Role.VIEWER, "read events (`GET /events/{id}`)"),
    "events:write": Scope(Role.OPERATOR, "send events and open the chat socket (`POST /events`, `/ws-tickets`)"),
    "runs:read": Scope(Role.VIEWER, "read runs, their events and streams"),
    "runs:write": Scope(Role.OPERATOR, "cancel runs"),
    "conversations:read": Scope(Role.VIEWER, "read transcripts and conversation state"),
    "conversations:write": Scope(Role.OPERATOR, "take over and hand off conversations"),
    "actions:read": Scope(Role.VIEWER, "read platform actions runs asked for"),
    "actions:write": Scope(Role.OPERATOR, "approve or reject platform actions"),
    "artifacts:read": Scope(Role.VIEWER, "read artifacts and their content"),
    "artifacts:write": Scope(Role.OPERATOR, "upload artifacts"),
    "runners:read": Scope(Role.VIEWER, "read the runner catalog"),
    "runners:write": Scope(Role.DEVELOPER, "refresh the runner catalog (a key also needs the operator flag)"),
    "devtokens:write": Scope(Role.DEVELOPER, "make and revoke development-runtime tokens"),
    "bindings:read": Scope(Role.VIEWER, "read bindings"),
    "bindings:write": Scope(Role.DEVELOPER, "create, change and delete bindings"),
    "knowledge:read": Scope(Role.VIEWER, "read knowledge bases and documents"),
    "knowledge:write": Scope(Role.DEVELOPER, "create knowledge bases, upload and delete documents"),
    "schedules:read": Scope(Role.VIEWER, "read schedules"),
    "schedules:write": Scope(Role.DEVELOPER, "create, change and delete schedules"),
    "webhooks:read": Scope(Role.VIEWER, "read completion webhooks and their deliveries"),
    "webhooks:write": Scope(Role.DEVELOPER, "create, change, delete webhooks, rotate secrets, redeliver"),
    "resources:read": Scope(Role.VIEWER, "read model providers, models, MCP servers and tools"),
    "resources:write": Scope(Role.ADMIN, "create, change and delete model providers, models and MCP servers"),
    "bots:read": Scope(Role.VIEWER, "read bots (credentials masked)"),
    "bots:write": Scope(Role.ADMIN, "create, change and delete bots"),
    "persons:read": Scope(Role.OPERATOR, "read persons, their identities and everything stored about them"),
    "persons:write": Scope(Role.ADMIN, "link and merge persons, export and erase a person's data"),
    "budgets:read": Scope(Role.VIEWER, "read budgets, costs and usage"),
    "budgets:write": Scope(Role.ADMIN, "create, change and delete budgets"),
    "keys:read": Scope(Role.ADMIN, "read the workspace's API keys"),
    "keys:write": Scope(Role.ADMIN, "make and revoke API keys"),
    "members:read": Scope(Role.VIEWER, "read the workspace's members and their roles"),
    "members:write": Scope(Role.ADMIN, "add and remove members, change roles (owner roles: owners only)"),
    "workspace:write": Scope(Role.OWNER, "change or delete the workspace itself"),
}
"""Every scope, with its least role. A key's scopes are names from here."""

ANY_MEMBER = None
"""In a view's `required_scopes`: any member of the workspace, or any key of it (e.g. `GET /membership`)."""


def scope_least_role(scope: str) -> str:
    """A scope's least role; a name missing from SCOPES (a view naming a scope not added here yet) needs the
    role of UNDECLARED_SCOPE, so a typo closes the operation rather than opening it."""
    known = SCOPES.get(scope) or SCOPES[UNDECLARED_SCOPE]
    return str(known.role)


def role_rank(role: str | None) -> int:
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else -1


def role_reaches(role: str | None, least: str) -> bool:
    return role_rank(role) >= role_rank(least)


def scopes_parse(raw: str | Iterable[str]) -> list[str]:
    """Scope names from `a,b` or a list, checked against SCOPES; ValueError names the unknown ones."""
    names = [s.strip() for s in (raw.split(",") if isinstance(raw, str) else raw) if s and s.strip()]
    unknown = sorted({name for name in names if name not in SCOPES})
    if unknown:
        raise ValueError(f"Unknown scope(s): {', '.join(unknown)}. Known: {', '.join(SCOPES)}.")
    return sorted(set(names), key=list(SCOPES).index)


# --- who holds which role ----------------------------------------------------------------------------


def user_roles(user: Any) -> dict[int, str]:
    """Workspace pk → the user's role there (no superuser rule: see `principal_roles`)."""
    if user is None or not getattr(user, "is_authenticated", False) or isinstance(user, ApiKeyPrincipal):
        return {}
    return dict(WorkspaceMembership.objects.filter(user_id=user.pk).values_list("workspace_id", "role"))


def request_roles(request: HttpRequest) -> dict[int, str]:
    """`user_roles` of the request's user, read once per request: the admin asks per row and per button."""
    cached: dict[int, str] | None = getattr(request, "_langbot_workspace_roles", None)
    if cached is None:
        cached = user_roles(request.user)
        request._langbot_workspace_roles = cached  # type: ignore[attr-defined]
    return cached


def is_host_operator(user: Any) -> bool:
    return bool(getattr(user, "is_superuser", False) and getattr(user, "is_active", False))


def request_role_in(request: HttpRequest, workspace_id: int | None) -> str | None:
    """The request user's role in one workspace: owner for superusers, None for a non-member."""
    if is_host_operator(request.user):
        return Role.OWNER
    return request_roles(request).get(workspace_id or 0)


def request_may(request: HttpRequest, scope: str, workspace_id: int | None = None) -> bool:
    """Whether the request's (session) user may use `scope`: in that workspace, or — without one — in at
    least one of theirs (whether the admin shows the page or button at all)."""
    if is_host_operator(request.user):
        return True
    least = scope_least_role(scope)
    if workspace_id is not None:
        return role_reaches(request_roles(request).get(workspace_id), least)
    return any(role_reaches(role, least) for role in request_roles(request).values())


def workspace_ids_allowing(request: HttpRequest, scope: str) -> list[int]:
    """The workspaces of the request's user where their role reaches `scope` (not for superusers: they see all)."""
    least = scope_least_role(scope)
    return [pk for pk, role in request_roles(request).items() if role_reaches(role, least)]


def workspaces_allowing(request: HttpRequest, scope: str) -> QuerySet[Workspace]:
    if is_host_operator(request.user):
        return Workspace.objects.all()
    return Workspace.objects.filter(pk__in=workspace_ids_allowing(request, scope))


# --- the REST API's check ----------------------------------------------------------------------------


def scope_refusal(request: Request, scope: str | None, *, host_wide: bool = False) -> ApiError | None:
    """Why the caller may not use `scope` in the workspace it acts in (403 `forbidden` naming the scope and,
    for a session, the role it needs), or None when it may."""
    user = request.user
    if isinstance(user, ApiKeyPrincipal):
        granted = user.api_key.scopes or []
        if scope is None or not granted or scope in granted:
            return None
        return ApiError(
            403,
            "forbidden",
            f"This API key does not have the scope `{scope}`.",
            {"required_scope": scope, "scopes": list(granted)},
        )
    if is_host_operator(user) or host_wide:
        # host_wide: beyond any workspace (the runner catalog's refresh), the view's own operator check decides.
        return None
    workspace = request_workspace(request)
    role = request_roles(request._request).get(workspace.pk)
    if scope is None:
        return None  # request_workspace already refused a non-member
    least = scope_least_role(scope)
    if role_reaches(role, least):
        return None
    return ApiError(
        403,
        "forbidden",
        f"Your role in {workspace.slug} ({role}) may not do this: `{scope}` needs {least} or above.",
        {"required_scope": scope, "required_role": str(least), "role": role},
    )


UNDECLARED_SCOPE = "members:write"
"""What an operation whose view names no scope for its method needs: the scope only full-access keys and
admins hold, so a new view is closed to narrowed keys and lesser roles until it says what it is."""


def view_scope(view: Any, method: str) -> tuple[bool, str | None]:
    """(declared, scope) of a view's method: `required_scopes` maps each HTTP method to a scope name (or
    ANY_MEMBER); HEAD and OPTIONS are read like GET."""
    declared: dict[str, str | None] = getattr(view, "required_scopes", None) or {}
    method = "GET" if method in {"HEAD", "OPTIONS"} else method
    if method in declared:
        return True, declared[method]
    return False, UNDECLARED_SCOPE


class ScopePermission(BasePermission):
    """The REST API's role and scope check (settings: DEFAULT_PERMISSION_CLASSES, after IsAuthenticated).

    Each view says which scope each method uses in `required_scopes` (`{"GET": "runs:read", "POST":
    "runs:write"}`); a view beyond any workspace sets `host_wide = True`. Refusals raise 403 `forbidden`
    with `details.required_scope`."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        _, scope = view_scope(view, request.method or "GET")
        refusal = scope_refusal(request, scope, host_wide=bool(getattr(view, "host_wide", False)))
        if refusal is not None:
            raise refusal
        return True


# --- members -----------------------------------------------------------------------------------------


class MemberRefusedError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def member_change_refusal(
    *, actor_role: str | None, workspace: Workspace, before: str | None, after: str | None
) -> MemberRefusedError | None:
    """Whether someone of `actor_role` may move a member from `before` to `after` (None: not a member /
    removed). Only owners grant or take the owner role; the last owner stays."""
    if not role_reaches(actor_role, Role.ADMIN):
        return MemberRefusedError(403, "forbidden", "Only admins and owners manage members.")
    touches_owner = Role.OWNER in (before, after)
    if touches_owner and not role_reaches(actor_role, Role.OWNER):
        return MemberRefusedError(403, "forbidden", "Only an owner may grant, change or remove the owner role.")
    if before == Role.OWNER and after != Role.OWNER and _owner_count(workspace) <= 1:
        return MemberRefusedError(
            409, "members.last_owner", "The workspace's last owner stays: make another member owner first."
        )
    return None


def _owner_count(workspace: Workspace) -> int:
    return WorkspaceMembership.objects.filter(workspace=workspace, role=Role.OWNER).count()


def _checked(refusal: MemberRefusedError | None) -> None:
    if refusal is not None:
        raise refusal


@transaction.atomic
def member_add(*, workspace: Workspace, actor_role: str, username: str, role: str) -> WorkspaceMembership:
    user = get_user_model()._default_manager.filter(**{get_user_model().USERNAME_FIELD: username}).first()
    if user is None:
        raise MemberRefusedError(404, "not_found", f"No user {username!r} on this host.")
    existing = WorkspaceMembership.objects.select_for_update().filter(workspace=workspace, user=user).first()
    if existing is not None:
        raise MemberRefusedError(409, "members.exists", f"{username!r} is already a member ({existing.role}).")
    _checked(member_change_refusal(actor_role=actor_role, workspace=workspace, before=None, after=role))
    return WorkspaceMembership.objects.create(workspace=workspace, user=user, role=role)


@transaction.atomic
def member_role_set(*, membership: WorkspaceMembership, actor_role: str, role: str) -> WorkspaceMembership:
    # Locks the workspace's owners so two demotions at once cannot both pass the last-owner count.
    list(WorkspaceMembership.objects.select_for_update().filter(workspace_id=membership.workspace_id, role=Role.OWNER))
    _checked(
        member_change_refusal(actor_role=actor_role, workspace=membership.workspace, before=membership.role, after=role)
    )
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def member_remove(*, membership: WorkspaceMembership, actor_role: str | None, leaving: bool = False) -> None:
    """Remove a member; `leaving`: the member removes themselves, which any role may, but the last owner not."""
    list(WorkspaceMembership.objects.select_for_update().filter(workspace_id=membership.workspace_id, role=Role.OWNER))
    if leaving:
        if membership.role == Role.OWNER and _owner_count(membership.workspace) <= 1:
            raise MemberRefusedError(
                409, "members.last_owner", "The workspace's last owner cannot leave: make another member owner first."
            )
    else:
        _checked(
            member_change_refusal(
                actor_role=actor_role, workspace=membership.workspace, before=membership.role, after=None
            )
        )
    membership.delete()


def principal_role(request: Request, workspace: Workspace) -> str | None:
    """The role a REST caller acts with in its workspace: a key stands for at most KEY_ROLE."""
    if isinstance(request.user, ApiKeyPrincipal):
        return KEY_ROLE
    return request_role_in(request._request, workspace.pk)


def membership_user_label(user: AbstractBaseUser) -> str:
    return str(user.get_username())


# --- the admin's pages -------------------------------------------------------------------------------

ADMIN_SCOPES: dict[str, tuple[str, str]] = {
    "bindings.Workspace": ("members:read", "members:write"),
    "bindings.ApiKey": ("keys:read", "keys:write"),
    "bindings.Bot": ("bots:read", "bots:write"),
    "bindings.AgentBinding": ("bindings:read", "bindings:write"),
    "transcripts.EventLog": ("events:read", "events:write"),
    "transcripts.TranscriptItem": ("conversations:read", "conversations:write"),
    "transcripts.StateEntry": ("conversations:read", "conversations:write"),
    "transcripts.RetentionPurge": ("runs:read", "runs:write"),
    "runners.Run": ("runs:read", "runs:write"),
    "runners.ProxyCallAudit": ("runs:read", "runs:write"),
    "runners.PlatformActionRequest": ("actions:read", "actions:write"),
    "runners.Budget": ("budgets:read", "budgets:write"),
    "runners.DailySpend": ("budgets:read", "budgets:write"),
    "runtimes.DevelopmentToken": ("devtokens:write", "devtokens:write"),
    "runtimes.DevelopmentSession": ("runners:read", "devtokens:write"),
    "artifacts.Artifact": ("artifacts:read", "artifacts:write"),
    "resources.ModelProvider": ("resources:read", "resources:write"),
    "resources.Model": ("resources:read", "resources:write"),
    "resources.MCPServer": ("resources:read", "resources:write"),
    "resources.KnowledgeBase": ("knowledge:read", "knowledge:write"),
    "platforms.PlatformDelivery": ("bots:read", "bots:write"),
    "platforms.InboundRefusal": ("bots:read", "bots:write"),
    "webhooks.WebhookEndpoint": ("webhooks:read", "webhooks:write"),
    "webhooks.WebhookDelivery": ("webhooks:read", "webhooks:write"),
    "alerts.Alert": ("runs:read", "runs:write"),
    "alerts.AlertSettings": ("webhooks:read", "webhooks:write"),
    "schedules.Schedule": ("schedules:read", "schedules:write"),
    "takeover.ConversationHold": ("conversations:read", "conversations:write"),
    "takeover.WaitingConversation": ("conversations:read", "conversations:write"),
    "people.Person": ("persons:read", "persons:write"),
    "people.PersonAudit": ("persons:read", "persons:write"),
}
"""Model label → (the scope of viewing its admin pages, the scope of adding, changing, deleting and running
its actions). A workspace-scoped admin not listed needs the admin role for both (`UNDECLARED_SCOPE`)."""

ADMIN_DELETE_SCOPES: dict[str, str] = {"bindings.Workspace": "workspace:write"}
"""Where deleting needs more than changing: a workspace is deleted by its owners only."""


def admin_scopes(label: str) -> tuple[str, str, str]:
    """(view, change, delete) scopes of a model's admin."""
    read, write = ADMIN_SCOPES.get(label, (UNDECLARED_SCOPE, UNDECLARED_SCOPE))
    return read, write, ADMIN_DELETE_SCOPES.get(label, write)
