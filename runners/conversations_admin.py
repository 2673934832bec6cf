"""The admin's conversation pages (issue 31, item 4): `/admin/conversations/`, the conversations of the
workspaces the user sees (last message, time, bot, platform), and `/admin/conversations/<workspace>/<id>`, one
conversation as chat bubbles with, beside each reply, the run that wrote it — status, duration, tokens and cost
(`usage.host`), its tool calls as cards, its files and the citations it gave. Both are wrapped in
`admin.site.admin_view` (langbot_host/urls.py).

Who sees what: staff with the permission to view transcript items; a superuser every workspace, anyone else
only the workspaces they belong to (another's conversation answers 404, as a missing one does).

The conversation page's header has a block of its own (`conversation_actions`) for buttons that act on the
conversation, such as taking it over from the bot.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from bindings.models import Workspace
from bindings.selectors import workspaces_of_member
from runners.admin import STATUS_COLOURS, run_duration_text
from runners.conversations import CONVERSATIONS_PER_PAGE, conversation_page, conversation_rows
from transcripts.admin import transcript_url

VIEW_PERMISSION = "transcripts.view_transcriptitem"


def _visible_workspaces(request: HttpRequest) -> QuerySet[Workspace] | None:
    """None: every workspace (a superuser)."""
    user = request.user
    if not user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied
    return None if getattr(user, "is_superuser", False) else workspaces_of_member(user_id=user.pk)


def _int(value: str | None, default: int) -> int:
    try:
        return max(int(value or default), 0)
    except ValueError:
        return default


def conversation_url(*, workspace_id: int, conversation_id: str) -> str:
    return reverse("admin-conversation", kwargs={"workspace_id": workspace_id, "conversation_id": conversation_id})


def conversation_list_view(request: HttpRequest) -> HttpResponse:
    workspaces = _visible_workspaces(request)
    chosen = _int(request.GET.get("workspace"), 0)
    scope = workspaces if workspaces is not None else Workspace.objects.all()
    if chosen:
        scope = scope.filter(pk=chosen)
    search = request.GET.get("q", "").strip()
    offset = _int(request.GET.get("offset"), 0)
    rows, more = conversation_rows(workspaces=scope, search=search, offset=offset)

    def page_url(at: int) -> str:
        query = {k: v for k, v in {"workspace": chosen or "", "q": search, "offset": at}.items() if v}
        return f"?{urlencode(query)}" if query else "?"

    context = {
        **admin.site.each_context(request),
        "title": gettext("Conversations"),
        "rows": [
            (row, conversation_url(workspace_id=row.workspace_id, conversation_id=row.conversation_id)) for row in rows
        ],
        "workspaces": list(workspaces if workspaces is not None else Workspace.objects.order_by("slug")),
        "chosen_workspace": chosen,
        "search": search,
        "newer_url": page_url(max(offset - CONVERSATIONS_PER_PAGE, 0)) if offset else "",
        "older_url": page_url(offset + CONVERSATIONS_PER_PAGE) if more else "",
    }
    return TemplateResponse(request, "admin/transcripts/conversation_list.html", context)


def conversation_detail_view(request: HttpRequest, workspace_id: int, conversation_id: str) -> HttpResponse:
    workspaces = _visible_workspaces(request)
    scope = workspaces if workspaces is not None else Workspace.objects.all()
    workspace = scope.filter(pk=workspace_id).first()
    before = _int(request.GET.get("before"), 0) or None
    page = conversation_page(workspace=workspace, conversation_id=conversation_id, before=before) if workspace else None
    if workspace is None or page is None or not page.turns:
        raise Http404(gettext("No such conversation."))

    def link(ref: dict[str, Any]) -> dict[str, Any] | None:
        """A file of a message or run as the page links it: the artifact's content (the REST API, in this
        workspace) or the URL of a content part; images are shown as thumbnails."""
        if not isinstance(ref, dict):
            return None
        artifact_id = ref.get("artifact_id")
        url = (
            f"{reverse('artifact-content', args=[str(artifact_id)])}?{urlencode({'workspace': workspace.slug})}"
            if artifact_id
            else ref.get("image_url") or ref.get("file_url")
        )
        if not isinstance(url, str) or not url:
            return None
        mime = str(ref.get("mime_type") or "")
        name = str(ref.get("name") or ref.get("file_name") or artifact_id or gettext("file"))
        return {"url": url, "name": name, "image": mime.startswith("image/") or ref.get("type") == "image_url",
                "size": ref.get("size")}  # fmt: skip

    colours = {str(status): colour for status, colour in STATUS_COLOURS.items()}
    for turn in page.turns:
        item = turn.item
        parts = [p for p in item.contents or [] if isinstance(p, dict) and p.get("type") in ("image_url", "file_url")]
        turn.files = [f for f in (link(ref) for ref in [*(item.artifacts or []), *parts]) if f]
        for card in ([turn.run] if turn.run else []) + turn.unanswered:
            card.link = reverse("admin:runners_run_change", args=[card.run.pk])
            card.duration = run_duration_text(card.run)
            card.colour = colours.get(card.run.status, "#6b7483")
            card.files = [f for f in (link(ref) for ref in card.files) if f]
    context = {
        **admin.site.each_context(request),
        "title": conversation_id,
        "workspace": workspace,
        "conversation_id": conversation_id,
        "page": page,
        "older_url": f"?{urlencode({'before': page.older_before})}" if page.older_before else "",
        "newest_url": "?" if before else "",
        "transcript_rows_url": transcript_url(workspace_id=workspace.pk, conversation_id=conversation_id),
    }
    return TemplateResponse(request, "admin/transcripts/conversation.html", context)
