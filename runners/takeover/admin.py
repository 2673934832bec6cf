"""Admin of human takeover: the inbox (conversations whose runner asked for a human, oldest first, each
with a Take over button), every hold with its Release button, and the two POST views those buttons (and
the conversation pages) use. A member sees and acts on their workspaces' conversations only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.models import Workspace
from runners.takeover.models import ConversationHold, WaitingConversation
from runners.takeover.services import (
    ConversationNotFoundError,
    ConversationNotHeldError,
    conversation_release,
    conversation_takeover,
)
from transcripts.admin import ReadOnlyWorkspaceAdmin

CHANGE_PERMISSION = "takeover.change_conversationhold"


def _may_act(request: HttpRequest, workspace_id: int) -> bool:
    """Staff with the hold's change permission, in a workspace they belong to (superusers: any)."""
    user: Any = request.user
    if not user.has_perm(CHANGE_PERMISSION):
        return False
    return bool(user.is_superuser) or Workspace.objects.filter(pk=workspace_id, memberships__user_id=user.pk).exists()


def _back(request: HttpRequest) -> HttpResponseRedirect:
    target = request.POST.get("next") or request.META.get("HTTP_REFERER") or ""
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("admin:takeover_waitingconversation_changelist")
    return HttpResponseRedirect(target)


def takeover_button(*, workspace_id: int, conversation_id: str, release: bool) -> SafeString:
    """A button for a row of the admin's changelist form (submitting that form to the takeover views);
    the conversation page's header uses `takeover_url` in a form of its own."""
    return format_html(
        '<button type="submit" class="button" formmethod="post" formaction="{}">{}</button>',
        takeover_url(workspace_id=workspace_id, conversation_id=conversation_id, release=release),
        gettext("Release") if release else gettext("Take over"),
    )


def takeover_url(*, workspace_id: int, conversation_id: str, release: bool) -> str:
    name = "admin:takeover_conversation_release" if release else "admin:takeover_conversation_takeover"
    return reverse(name, kwargs={"workspace_id": workspace_id, "conversation_id": conversation_id})


@admin.register(ConversationHold)
class ConversationHoldAdmin(ReadOnlyWorkspaceAdmin[ConversationHold]):
    list_display = ["conversation_id", "status", "held_by", "reason", "started_at", "ended_at", "button"]
    list_filter = ["status", "workspace"]
    search_fields = ["conversation_id", "held_by"]
    list_select_related = ["workspace", "bot"]
    readonly_fields = [
        "workspace", "conversation_id", "bot", "status", "reason", "requested_by_run", "requested_at", "held_by",
        "started_at", "ended_at", "ended_by", "reported_run_id",
    ]  # fmt: skip

    @admin.display(description=_("action"))
    def button(self, obj: ConversationHold) -> SafeString | str:
        if obj.status == ConversationHold.Status.RELEASED:
            return ""
        held = obj.status == ConversationHold.Status.HELD
        return takeover_button(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id, release=held)

    def get_urls(self) -> list[URLPattern]:
        take = self.admin_site.admin_view(self.takeover_view)
        release = self.admin_site.admin_view(self.release_view)
        return [
            path(
                "conversation/<int:workspace_id>/<path:conversation_id>/take-over/",
                take,
                name="takeover_conversation_takeover",
            ),
            path(
                "conversation/<int:workspace_id>/<path:conversation_id>/release/",
                release,
                name="takeover_conversation_release",
            ),
            *super().get_urls(),
        ]

    def takeover_view(self, request: HttpRequest, workspace_id: int, conversation_id: str) -> HttpResponse:
        """POST: hold the conversation for this staff member; its messages then start no run."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not _may_act(request, workspace_id):
            raise PermissionDenied
        operator = request.user.get_username()
        try:
            hold = conversation_takeover(workspace_id=workspace_id, conversation_id=conversation_id, operator=operator)
        except ConversationNotFoundError:
            self.message_user(request, gettext("No such conversation."), messages.ERROR)
            return _back(request)
        if hold.held_by == operator:
            self.message_user(request, gettext("You hold this conversation now: its messages start no run."))
        else:
            self.message_user(request, gettext("%(who)s holds this conversation.") % {"who": hold.held_by})
        return _back(request)

    def release_view(self, request: HttpRequest, workspace_id: int, conversation_id: str) -> HttpResponse:
        """POST: hand the conversation back to its bindings."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not _may_act(request, workspace_id):
            raise PermissionDenied
        try:
            conversation_release(
                workspace_id=workspace_id, conversation_id=conversation_id, operator=request.user.get_username()
            )
        except ConversationNotHeldError:
            self.message_user(request, gettext("Nobody holds this conversation."), messages.WARNING)
        else:
            self.message_user(request, gettext("Released: the bot answers this conversation again."))
        return _back(request)


@admin.register(WaitingConversation)
class WaitingConversationAdmin(ReadOnlyWorkspaceAdmin[WaitingConversation]):
    """The inbox. Its buttons submit the changelist form to the takeover view (the form carries the CSRF token)."""

    list_display = ["conversation_id", "reason", "requested_at", "bot", "workspace", "button"]
    list_display_links = None
    list_select_related = ["workspace", "bot"]
    ordering = ["requested_at", "id"]
    search_fields = ["conversation_id", "reason"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WaitingConversation]:
        return super().get_queryset(request).filter(status=ConversationHold.Status.REQUESTED)

    @admin.display(description=_("action"))
    def button(self, obj: WaitingConversation) -> SafeString:
        return takeover_button(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id, release=False)
