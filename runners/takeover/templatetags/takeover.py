"""`{% handoffs_waiting as n %}`: how many conversations of the staff member's workspaces wait for a human
(the admin header's banner links to the inbox when there are any)."""

from __future__ import annotations

from typing import Any

from django import template

from bindings.models import Workspace
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
