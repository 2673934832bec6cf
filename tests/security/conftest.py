"""Two workspaces for the authorization tests: `theirs`, holding one object of every kind whose ids and
names all contain MARKER (so any page or answer that shows one of them is caught by a substring test), and
`mine`, the workspace of the caller (an API key, a staff member, a run) who tries to reach them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.db import models
from django.forms.models import model_to_dict
from django.utils import timezone

from artifacts.services import artifact_create_from_bytes
from bindings.models import Workspace
from bindings.services import api_key_create, workspace_member_add
from people.models import Person, PersonAudit, PersonIdentity
from platforms.alerts.models import Alert, AlertSettings
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.schedules.models import Schedule
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from resources.models import KnowledgeBase, KnowledgeDocument, MCPServer, MCPTool
from runners.models import Budget, DailySpend, PlatformActionRequest, ProxyCallAudit, Run, RunEvent
from runners.takeover.models import ConversationHold, WaitingConversation
from runtimes.dev_access import dev_token_create
from runtimes.models import DevelopmentSession
from tests.factories import (
    AgentBindingFactory,
    BotFactory,
    ModelFactory,
    ModelProviderFactory,
    UserFactory,
    WorkspaceFactory,
)
from transcripts.models import EventLog, RetentionPurge, StateEntry, StorageEntry, TranscriptItem

MARKER = "zz-their"
"""In every id and name of the other workspace's objects; never in the caller's own."""


@dataclass
class Theirs:
    workspace: Workspace
    ids: dict[str, str]
    """Path parameter name → the id of their object of that kind."""
    objects: dict[str, models.Model] = field(default_factory=dict)
    """Registered model label → one of their rows of that model."""


def _m(name: str) -> str:
    return f"{MARKER}-{name}"


@pytest.fixture
def theirs(db: Any) -> Theirs:
    workspace = WorkspaceFactory.create(slug=_m("ws"), name=_m("workspace"))
    bot = BotFactory.create(workspace=workspace, bot_id=_m("bot"), name=_m("bot"), platform="telegram",
                            credentials={"bot_token": "123:" + _m("token"), "secret_token": _m("secret")})  # fmt: skip
    binding = AgentBindingFactory.create(workspace=workspace, binding_id=_m("binding"), name=_m("binding"))
    provider = ModelProviderFactory.create(workspace=workspace, provider_id=_m("provider"), name=_m("provider"))
    model = ModelFactory.create(workspace=workspace, provider=provider, model_id=_m("model"), name=_m("model"))
    server = MCPServer.objects.create(workspace=workspace, server_id=_m("mcp"), name=_m("mcp"), command=_m("cmd"))
    tool = MCPTool.objects.create(workspace=workspace, server=server, tool_name=_m("tool"), remote_name=_m("tool"))
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id=_m("kb"), name=_m("kb"), embedding_model=model)
    conversation = _m("conv")
    event = EventLog.objects.create(
        workspace=workspace, event_id=_m("event"), event_type="message.received", source="api", bot=bot,
        conversation_id=conversation, input={"text": _m("text")},
    )  # fmt: skip
    item = TranscriptItem.objects.create(
        workspace=workspace, conversation_id=conversation, role="user", content=_m("said"), event=event
    )
    run = Run.objects.create(
        workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id, runner_id=binding.runner_id,
        conversation_id=conversation, status=Run.Status.COMPLETED, output=_m("output"), bot=bot,
    )  # fmt: skip
    RunEvent.objects.create(run=run, seq=1, type="message.completed", data={"text": _m("output")})
    artifact = artifact_create_from_bytes(
        workspace=workspace, data=_m("blob").encode(), name=_m("file.txt"), mime_type="text/plain",
        conversation_id=conversation, source="upload", event=event,
    )  # fmt: skip
    document = KnowledgeDocument.objects.create(
        workspace=workspace, knowledge_base=kb, name=_m("doc"), artifact=artifact
    )
    state = StateEntry.objects.create(
        workspace=workspace, scope="conversation", scope_key=_m("scope"), key=_m("key"), value=_m("state")
    )
    storage = StorageEntry.objects.create(
        workspace=workspace, area="workspace", owner_key="workspace", key=_m("key"), value=_m("stored").encode(),
        size_bytes=10,
    )  # fmt: skip
    schedule = Schedule.objects.create(
        workspace=workspace, schedule_id=_m("schedule"), name=_m("schedule"), cron="0 9 * * *", bot=bot,
        input_text=_m("scheduled"),
    )  # fmt: skip
    endpoint = WebhookEndpoint.objects.create(
        workspace=workspace, url=f"https://{MARKER}.example/hook", description=_m("webhook"),
        event_types=["run.completed"], secret="whsec_" + _m("secret"), binding=binding,
    )  # fmt: skip
    delivery = WebhookDelivery.objects.create(
        workspace=workspace, endpoint=endpoint, event_id=_m("delivery"), event_type="run.completed",
        run_id=run.run_id, payload={"text": _m("payload")}, status=WebhookDelivery.Status.FAILED,
    )  # fmt: skip
    platform_delivery = PlatformDelivery.objects.create(
        workspace=workspace, run=run, bot=bot, platform="telegram", status="failed", chat_id=_m("chat")
    )
    refusal = InboundRefusal.objects.create(
        workspace=workspace, bot=bot, platform="telegram", reason="signature", message=_m("refused")
    )
    action = PlatformActionRequest.objects.create(
        workspace=workspace, run=run, runner_id=run.runner_id, binding_key=binding.binding_id, action="message.send",
        target={"chat_id": _m("chat")}, payload={"text": _m("action")}, origin="proxy", status="pending_approval",
    )  # fmt: skip
    audit = ProxyCallAudit.objects.create(
        run_id=str(run.run_id), runner_id=run.runner_id, workspace_id=workspace.pk, action="history_page",
        resource=_m("resource"), scope=conversation, outcome="ok", created_at=timezone.now(),
    )  # fmt: skip
    key, _ = api_key_create(workspace=workspace, name=_m("key"))
    member = UserFactory.create(username=_m("member"))
    membership = workspace_member_add(workspace=workspace, user=member, role="owner")
    dev_token, _ = dev_token_create(workspace=workspace, name=_m("devtoken"))
    dev_session = DevelopmentSession.objects.create(
        session_id=_m("session"), workspace=workspace, token=dev_token, peer=_m("peer"), runner_ids=[_m("runner")]
    )
    purge = RetentionPurge.objects.create(
        sweep_started_at=timezone.now(), workspace=workspace, kind="artifacts", count=3, cutoff=timezone.now()
    )
    budget = Budget.objects.create(workspace=workspace, scope="bot", bot=bot, amount=7, name=_m("budget"))
    spend = DailySpend.objects.create(
        workspace=workspace, day=timezone.now().date(), bot_key=bot.bot_id, actor_key=_m("actor"), cost=7, calls=1
    )
    hold = ConversationHold.objects.create(
        workspace=workspace, conversation_id=conversation, bot=bot, status="held", held_by=_m("operator"),
        reason=_m("reason"), started_at=timezone.now(),
    )  # fmt: skip
    waiting = WaitingConversation.objects.create(
        workspace=workspace, conversation_id=_m("waiting"), status="requested", reason=_m("waits"),
        requested_at=timezone.now(),
    )  # fmt: skip
    alert = Alert.objects.create(
        workspace=workspace, kind="queue.wait", subject=_m("queue"), raised_at=timezone.now(), details={"m": _m("a")}
    )
    alert_settings = AlertSettings.objects.create(workspace=workspace)
    person = Person.objects.create(workspace=workspace, display_name=_m("person"))
    identity = PersonIdentity.objects.create(workspace=workspace, person=person, channel="telegram", actor_id=_m("tg"))
    person_audit = PersonAudit.objects.create(workspace=workspace, person_id=person.person_id, action="viewed")
    ids = {
        "person_id": str(person.person_id),
        "workspace_slug": workspace.slug, "bot_id": bot.bot_id, "binding_id": binding.binding_id,
        "binding_pk": str(binding.pk),
        "provider_id": provider.provider_id, "model_id": model.model_id, "server_id": server.server_id,
        "kb_id": kb.kb_id, "document_id": str(document.document_id), "event_id": event.event_id,
        "run_id": str(run.run_id), "conversation_id": conversation, "artifact_id": str(artifact.artifact_id),
        "schedule_id": schedule.schedule_id, "webhook_id": str(endpoint.webhook_id),
        "delivery_id": str(delivery.delivery_id), "tool_name": tool.tool_name, "action_id": str(action.pk),
        "budget_id": str(budget.budget_id), "username": member.username,
    }  # fmt: skip
    rows: list[models.Model] = [
        workspace, membership, key, bot, binding, provider, model, server, kb, document, event, item, run, artifact,
        state, storage, schedule, endpoint, delivery, platform_delivery, refusal, action, audit, purge, dev_token,
        dev_session, budget, spend, hold, waiting, alert, alert_settings, person, identity, person_audit,
    ]  # fmt: skip
    return Theirs(workspace=workspace, ids=ids, objects={row._meta.label: row for row in rows})


def snapshot(workspace: Workspace) -> dict[str, list[dict[str, Any]]]:
    """Every row of the workspace, model by model: what no attempt from another workspace may change."""
    taken: dict[str, list[dict[str, Any]]] = {}
    for model in apps.get_models():
        names = {f.name for f in model._meta.get_fields()}
        if "workspace" in names:
            rows = model._default_manager.filter(workspace=workspace)
        elif "workspace_id" in {getattr(f, "attname", "") for f in model._meta.get_fields()}:
            rows = model._default_manager.filter(workspace_id=workspace.pk)
        else:
            continue
        taken[model._meta.label] = [_plain(model_to_dict(row)) | {"pk": row.pk} for row in rows.order_by("pk")]
    taken["bindings.Workspace"] = [_plain(model_to_dict(workspace))]
    return taken


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if not isinstance(v, int | float | bool | type(None) | str) else v) for k, v in values.items()}


@dataclass
class Mine:
    workspace: Workspace
    staff: Any
    """A staff member of this workspace only, with every model permission of the workspace-scoped admins."""


@pytest.fixture
def mine(db: Any) -> Mine:
    workspace = WorkspaceFactory.create(slug="mine", name="mine")
    staff = UserFactory.create(username="mine-staff", is_staff=True)
    # The workspace's only owner: every role's right in it, and the membership routes' last-owner rule.
    workspace_member_add(workspace=workspace, user=staff, role="owner")
    return Mine(workspace=workspace, staff=staff)


def grant_permissions(user: Any, labels: list[str]) -> None:
    """Every permission (view, add, change, delete) on the given models."""
    permissions = Permission.objects.none()
    for label in labels:
        app_label, model_name = label.lower().split(".")
        permissions |= Permission.objects.filter(content_type__app_label=app_label, content_type__model=model_name)
    user.user_permissions.set(permissions)
