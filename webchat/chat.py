"""The web debug chat: its page (`/chat/`, login at `/chat/login/`) and the two writes the chat WebSocket
makes on a caller's behalf — a chat message becomes a `message.received` event through the Event Gateway
(`event_ingest`, source `webui`), and a cancel goes to `run_cancel_request`.

`binding_id` on a chat message does not bypass the resolver: for a bot-scoped binding it picks that bot,
and in every case the message is refused (`binding.not_routed`, nothing ingested) unless the resolver
would hand it to that binding — so the chat shows exactly what the same message from a platform would do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Max, Min
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, path, resolve, reverse, reverse_lazy
from django.utils.translation import gettext as _
from django.views.decorators.csrf import ensure_csrf_cookie
from pydantic import ValidationError

from bindings.models import AgentBinding, Workspace, WorkspaceMembership
from bindings.roles import role_reaches, scope_least_role
from bindings.selectors import (
    BindingResolution,
    WorkspaceChoiceError,
    binding_candidates,
    bindings_choose,
    bindings_visible,
    bot_list,
    workspace_for_user,
)
from foundation.api_errors import field_errors
from gateway.envelope import AttachmentIn, EventEnvelopeIn, EventSource
from gateway.services import EventRefusedError, event_ingest
from runners.lifecycle.services import run_cancel_request
from runners.live.publish import run_status_message
from runners.models import Run
from runners.selectors import run_get
from transcripts.models import EventLog
from webchat.trying import try_urlpatterns

CANCEL_REASON = "cancelled from the web chat"
CHAT_EVENT_TYPE = "message.received"
RECENT_CONVERSATIONS = 30


@dataclass(frozen=True)
class ChatCaller:
    workspace_id: int
    principal: str  # `user:<pk>` or `api-key:<prefix>`
    display_name: str
    # An admin's "try it" socket (webchat.trying): messages go to this binding only.
    binding_id: str | None = None


class ChatRefusedError(Exception):
    """A chat request the host will not carry out; `code` and `message` go to the client as an `error`."""

    def __init__(self, code: str, message: str, **details: Any):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass
class ChatSubmission:
    event_id: str
    conversation_id: str
    statuses: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None


def _binding_of(workspace: Workspace, binding_id: str) -> AgentBinding:
    binding = bindings_visible(workspace=workspace).filter(binding_id=binding_id).order_by("workspace_id").first()
    if binding is None:
        raise ChatRefusedError("not_found", _("No binding %(id)r in this workspace.") % {"id": binding_id})
    return binding


def _caller_may(caller: ChatCaller, scope: str) -> bool:
    """A signed-in member acts in the chat only as far as their role reaches (README, "Workspace roles": a
    viewer reads); a ticket's key was checked for its scope when the ticket was issued."""
    kind, _sep, pk = caller.principal.partition(":")
    if kind != "user":
        return True
    membership = WorkspaceMembership.objects.filter(workspace_id=caller.workspace_id, user_id=pk).first()
    if membership is None:
        return bool(get_user_model().objects.filter(pk=pk, is_superuser=True, is_active=True).exists())
    return role_reaches(membership.role, scope_least_role(scope))


def _refuse_unless_may(caller: ChatCaller, scope: str) -> None:
    if not _caller_may(caller, scope):
        raise ChatRefusedError(
            "forbidden",
            _("Your role in this workspace does not allow this (it needs %(role)s).")
            % {"role": scope_least_role(scope)},
            required_scope=scope,
        )


def chat_message_submit(
    *,
    caller: ChatCaller,
    conversation_id: str,
    text: str,
    attachments: list[AttachmentIn],
    binding_id: str | None = None,
    bot_id: str | None = None,
) -> ChatSubmission:
    """Ingest one chat message as a gateway event and describe the runs it started as `run.status`
    messages. Raises `ChatRefusedError` for invalid input or a binding that would not receive it."""
    _refuse_unless_may(caller, "events:write")
    workspace = Workspace.objects.get(pk=caller.workspace_id)
    resolution: BindingResolution | None = None
    if binding_id is not None:
        # The resolver's candidates (cached per process) hold every binding that could receive the message;
        # a disabled or unknown one is looked up only to say why it cannot.
        candidates = binding_candidates(workspace=workspace)
        binding = min(
            (b for b in candidates if b.binding_id == binding_id),
            key=lambda b: b.workspace_id is None,  # the workspace's own binding before a global one
            default=None,
        ) or _binding_of(workspace, binding_id)
        if binding.scope_type == AgentBinding.ScopeType.BOT:
            if bot_id is not None and bot_id != binding.scope_id:
                raise ChatRefusedError(
                    "invalid_argument", f"Binding {binding_id!r} belongs to bot {binding.scope_id!r}, not {bot_id!r}."
                )
            bot_id = binding.scope_id
        resolution = bindings_choose(candidates, workspace=workspace, event_type=CHAT_EVENT_TYPE, bot_id=bot_id)
        if binding.pk not in {b.pk for b in resolution.to_run}:
            chosen = resolution.replying.binding_id if resolution.replying else None
            raise ChatRefusedError(
                "binding.not_routed",
                f"A message{f' to bot {bot_id!r}' if bot_id else ''} would not reach binding {binding_id!r}"
                + (f"; {chosen!r} answers it." if chosen else "."),
                replying_binding_id=chosen,
            )
    try:
        envelope = EventEnvelopeIn.model_validate(
            {
                "source": EventSource.WEBUI,
                "event_type": CHAT_EVENT_TYPE,
                "bot_id": bot_id,
                "conversation_id": conversation_id,
                "actor": {"actor_type": "user", "actor_id": caller.principal, "actor_name": caller.display_name},
                "input": {"text": text or None, "attachments": [a.model_dump(exclude_none=True) for a in attachments]},
            }
        )
    except ValidationError as exc:
        fields = field_errors(exc)
        raise ChatRefusedError("invalid_argument", _("The message has invalid fields."), fields=fields) from None
    try:
        result = event_ingest(workspace=workspace, envelope=envelope, resolution=resolution)
    except EventRefusedError as exc:
        # `input.unsupported` and the like keep their own code, for the chat to show.
        raise ChatRefusedError(exc.code, str(exc), fields=exc.fields) from None
    event = result.event
    submission = ChatSubmission(event_id=event.event_id, conversation_id=event.conversation_id)
    for run in result.runs:
        # The socket's `run.status`, with what the chat shows about a run it did not know yet.
        submission.statuses.append(
            {
                **run_status_message(run),
                "binding_id": run.binding_key,
                "runner_id": run.runner_id,
                "is_observer": run.is_observer,
                "conversation_id": event.conversation_id,
                "event_id": event.event_id,
            }
        )
    if event.status == EventLog.Status.HELD:
        submission.error = {
            "code": "conversation.held",
            "message": _("A person holds this conversation: your message reached them and started no run."),
        }
    elif event.status == EventLog.Status.NO_BINDING:
        submission.error = {"code": "no_binding", "message": _("No binding handles this message; nothing ran.")}
    elif event.error:
        submission.error = {"code": event.error.get("code", "error"), "message": event.error.get("message", "")}
    return submission


def chat_run_cancel(*, caller: ChatCaller, run_id: str) -> dict[str, Any]:
    """Ask a run of the caller's workspace to stop; returns its `run.status` as stored now."""
    _refuse_unless_may(caller, "runs:write")
    workspace = Workspace.objects.get(pk=caller.workspace_id)
    run = run_get(workspace=workspace, run_id=run_id)
    if run is None:
        raise ChatRefusedError("not_found", _("No run %(id)r in this workspace.") % {"id": run_id})
    if run.is_terminal:
        raise ChatRefusedError(
            "run.finished", _("The run already ended (%(status)s).") % {"status": run.status}, status=run.status
        )
    return run_status_message(run_cancel_request(run=run, reason=CANCEL_REASON))


# --- the page ----------------------------------------------------------------------------------------


def chat_conversations_recent(*, workspace: Workspace, limit: int = RECENT_CONVERSATIONS) -> list[dict[str, Any]]:
    """The workspace's most recently active conversations, newest first: the first input (what the page
    titles a conversation with, beside its start time) and the last input's preview."""
    latest = list(
        EventLog.objects.filter(workspace=workspace)
        .exclude(conversation_id="")
        .values("conversation_id")
        .annotate(first_id=Min("id"), last_id=Max("id"))
        .order_by("-last_id")[:limit]
    )
    ids = [row["first_id"] for row in latest] + [row["last_id"] for row in latest]
    rows = EventLog.objects.filter(id__in=ids).values("id", "input_summary", "created_at")
    events: dict[int, dict[str, Any]] = {row["id"]: dict(row) for row in rows}
    conversations = []
    for row in latest:
        first: dict[str, Any] = events.get(row["first_id"], {})
        last: dict[str, Any] = events.get(row["last_id"], {})
        started = first.get("created_at")
        conversations.append(
            {
                "conversation_id": row["conversation_id"],
                "title": first.get("input_summary", ""),
                "started_at": started.isoformat() if started else None,
                "preview": last.get("input_summary", ""),
            }
        )
    return conversations


def _binding_summary(binding: AgentBinding | None) -> dict[str, Any] | None:
    if binding is None:
        return None
    return {
        "binding_id": binding.binding_id,
        "name": binding.name or binding.binding_id,
        "runner_id": binding.runner_id,
    }


def chat_targets(*, workspace: Workspace) -> dict[str, Any]:
    """What the chat's "Send to" offers, each target with the binding that would answer it now (the
    resolver's own choice, so the label tells the truth; `conflict` when the resolver would refuse)."""
    candidates = binding_candidates(workspace=workspace)

    def answered_by(bot_id: str | None) -> dict[str, Any]:
        resolution = bindings_choose(candidates, workspace=workspace, event_type=CHAT_EVENT_TYPE, bot_id=bot_id)
        return {"replying": _binding_summary(resolution.replying), "conflict": resolution.conflict}

    bindings = bindings_visible(workspace=workspace).filter(enabled=True).order_by("binding_id")
    return {
        "default": answered_by(None),
        "bots": [
            {"bot_id": b.bot_id, "name": b.name or b.bot_id, **answered_by(b.bot_id)}
            for b in bot_list(workspace=workspace)
            if b.enabled
        ],
        "bindings": [
            {
                "binding_id": b.binding_id,
                "name": b.name or b.binding_id,
                "runner_id": b.runner_id,
                "scope_type": b.scope_type,
                "scope_id": b.scope_id,
                "replies": b.replies,
            }
            for b in bindings
        ],
    }


def _artifact_upload_available() -> bool:
    # Attachments need the artifacts upload API (`POST /api/v1/artifacts`); the page hides them without it.
    try:
        resolve("/api/v1/artifacts")
    except Resolver404:
        return False
    return True


def _page_config(request: HttpRequest, workspace: Workspace) -> dict[str, Any]:
    return {
        "workspace": workspace.slug,
        "user": request.user.get_username(),
        "ws_path": "/ws/v1/chat/",
        "api": "/api/v1",
        "targets_url": reverse("chat-targets"),
        "attachments": _artifact_upload_available(),
        **chat_targets(workspace=workspace),
        "conversations": chat_conversations_recent(workspace=workspace),
        "run_statuses": list(Run.Status.values),
    }


@login_required(login_url=reverse_lazy("chat-login"))
@ensure_csrf_cookie
def chat_page(request: HttpRequest) -> HttpResponse:
    user: Any = request.user  # an authenticated user: login_required saw to that
    try:
        workspace = workspace_for_user(user=user, requested_slug=request.GET.get("workspace") or None)
    except WorkspaceChoiceError as exc:
        return render(request, "chat/no_workspace.html", {"message": exc.message}, status=exc.status)
    config = _page_config(request, workspace)
    return render(request, "chat/index.html", {"config": config})


def home_page(request: HttpRequest) -> HttpResponse:
    """`/`: where the admin's "View site" lands: links to the chat, the admin and the API docs."""
    return render(request, "chat/home.html")


@login_required(login_url=reverse_lazy("chat-login"))
def chat_targets_view(request: HttpRequest) -> HttpResponse:
    """The "Send to" targets as JSON, read again by the page so a binding edited meanwhile (another
    runner, another scope) is not shown with the label it had when the page loaded."""
    user: Any = request.user
    try:
        workspace = workspace_for_user(user=user, requested_slug=request.GET.get("workspace") or None)
    except WorkspaceChoiceError as exc:
        return JsonResponse({"error": {"code": "forbidden", "message": exc.message}}, status=exc.status)
    return JsonResponse(chat_targets(workspace=workspace))


chat_urlpatterns = [
    path("", chat_page, name="chat"),
    path("targets/", chat_targets_view, name="chat-targets"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="chat/login.html", next_page=reverse_lazy("chat")),
        name="chat-login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page=reverse_lazy("chat-login")), name="chat-logout"),
    # The binding admin's "try it" box asks for its socket ticket here.
    *try_urlpatterns,
]
