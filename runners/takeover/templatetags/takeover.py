"""`{% handoffs_waiting as n %}`: how many conversations of the staff member's workspaces wait for a human
(the admin header's banner links to the inbox when there are any); `{% conversation_takeover_buttons
workspace conversation_id %}`: Take over / Release in the admin conversation page's header."""

from __future__ import annotations

from typing import Any

from django import template
from django.middleware.csrf import get_token
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from bindings.models import Workspace
from runners.takeover.admin import CHANGE_PERMISSION, takeover_url
from runners.takeover.models import ConversationHold
from runners.takeover.services import conversation_hold_open
from runners.takeover.services import handoffs_waiting as waiting_holds

register = template.Library()


@register.simple_tag(takes_context=True)
def handoffs_waiting(context: dict[str, Any]) -> int:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not (user.is_active and user.is_staff):
        return 0
    if user.is_superuser:
        return waiting_holds().count()
    member_of = list(Workspace.objects.filter(memberships__user_id=user.pk).values_list("pk", flat=True))
    return waiting_holds(workspace_ids=member_of).count() if member_of else 0


@register.simple_tag(takes_context=True)
def conversation_takeover_buttons(context: dict[str, Any], workspace: Any, conversation_id: str) -> SafeString:
    """The admin conversation page's Take over / Release (a POST form to the takeover admin views), with
    who holds the conversation, or that it waits for a human."""
    request = context.get("request")
    if request is None or workspace is None or not request.user.has_perm(CHANGE_PERMISSION):
        return SafeString("")
    hold = conversation_hold_open(workspace_id=workspace.pk, conversation_id=conversation_id)
    held = hold is not None and hold.status == ConversationHold.Status.HELD
    note = ""
    if held:
        note = gettext("held by %(who)s") % {"who": hold.held_by} if hold is not None else ""
    elif hold is not None:
        note = gettext("waiting for a human")
    return format_html(
        '<form method="post" action="{}" class="takeover-form"><input type="hidden" name="csrfmiddlewaretoken" '
        'value="{}"><input type="hidden" name="next" value="{}">{}<button type="submit" class="button">{}</button>'
        "</form>",
        takeover_url(workspace_id=workspace.pk, conversation_id=conversation_id, release=held),
        get_token(request),
        request.get_full_path(),
        format_html("<span>{}</span> ", note) if note else "",
        gettext("Release") if held else gettext("Take over"),
    )
