"""The binding admin's "try it" box: a message sent through one binding over the chat socket.

The binding's change page asks `POST /chat/try/<binding pk>/ticket` (this module's view) for a one-time
socket ticket. It is issued only to a staff user whom the admin itself lets change that binding (the same
`has_change_permission` the change page answers to, so workspace roles apply unchanged), and only for a
binding of a workspace. The ticket names the binding: the socket it opens (`webchat.consumers`) checks
again that its user is still active staff of the workspace (`try_caller_allowed`), sends messages only to
that binding, and only in conversations of its own (`try_conversation_prefix`), so a try-it ticket
cannot be used to read or write the workspace's other conversations.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from bindings.models import AgentBinding, WorkspaceMembership
from webchat.tickets import TICKET_TTL_SECONDS, TicketGrant, ws_ticket_issue

USER_PRINCIPAL_PREFIX = "user:"


def try_conversation_prefix(binding_id: str) -> str:
    """What every conversation started from a binding's try-it box begins with."""
    return f"try:{binding_id}:"


def try_caller_allowed(grant: TicketGrant) -> bool:
    """Whether a try-it ticket's user may still use it: an active staff user who is a member of the
    ticket's workspace (or a superuser), the binding still being one of that workspace."""
    if not grant.binding_id or not grant.principal.startswith(USER_PRINCIPAL_PREFIX):
        return False
    user_pk = grant.principal.removeprefix(USER_PRINCIPAL_PREFIX)
    user = get_user_model().objects.filter(pk=int(user_pk) if user_pk.isdigit() else 0).first()
    if user is None or not (user.is_active and user.is_staff):
        return False
    binding_there = AgentBinding.objects.filter(workspace_id=grant.workspace_id, binding_id=grant.binding_id)
    if not binding_there.exists():
        return False
    if user.is_superuser:
        return True
    return WorkspaceMembership.objects.filter(workspace_id=grant.workspace_id, user_id=user.pk).exists()


def _refused(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


@require_POST
def try_ticket_view(request: HttpRequest, binding_pk: int) -> JsonResponse:
    """A one-time chat socket ticket for trying binding `binding_pk` from its admin page."""
    user: Any = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return _refused(403, "forbidden", _("Only staff of the binding's workspace may try it."))
    binding = AgentBinding.objects.filter(pk=binding_pk).first()
    model_admin = admin.site.get_model_admin(AgentBinding)
    # The same answer for a binding that does not exist as for one the user may not change.
    if binding is None or not model_admin.has_change_permission(request, binding):
        return _refused(404, "not_found", _("No such binding."))
    if binding.workspace_id is None:
        return _refused(
            400, "binding.global", _("A global binding is tried from the chat of a workspace, not from here.")
        )
    if (
        not user.is_superuser
        and not WorkspaceMembership.objects.filter(workspace_id=binding.workspace_id, user_id=user.pk).exists()
    ):
        return _refused(404, "not_found", _("No such binding."))
    token, _grant = ws_ticket_issue(
        workspace_id=binding.workspace_id,
        principal=f"{USER_PRINCIPAL_PREFIX}{user.pk}",
        display_name=user.get_full_name() or user.get_username(),
        binding_id=binding.binding_id,
    )
    return JsonResponse(
        {
            "ticket": token,
            "expires_in": TICKET_TTL_SECONDS,
            "url": f"/ws/v1/chat/?ticket={token}",
            "binding_id": binding.binding_id,
        },
        status=201,
    )


try_urlpatterns = [path("try/<int:binding_pk>/ticket", try_ticket_view, name="binding-try-ticket")]
