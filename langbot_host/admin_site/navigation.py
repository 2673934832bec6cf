"""The admin's navigation: which group each admin page stands in, in the order a workspace is set up
(a provider and its models, then tools and knowledge, the runner and its binding, the bot that brings
events, automation), then what happened (activity) and who may do what (access).

A model is named by its label (`app_label.ModelName`). A registered model no group names still shows, in a
last group of its own, so a new admin is never lost from the menu; a test lists the registered models
against these groups so that each new one gets its place. `PAGES` are admin pages that belong to no model
(named by URL); one whose URL does not resolve (its app is not installed) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


@dataclass(frozen=True)
class Group:
    slug: str
    name: str | Promise
    models: tuple[str, ...]


@dataclass(frozen=True)
class Page:
    group: str
    url_name: str
    name: str | Promise
    after: str  # the model it follows in its group; first when that model is not shown


GROUPS: tuple[Group, ...] = (
    Group("models", _("Models & tools"), ("resources.ModelProvider", "resources.Model", "resources.MCPServer")),
    Group("knowledge", _("Knowledge"), ("resources.KnowledgeBase",)),
    Group(
        "runners",
        _("Runners & bindings"),
        ("bindings.RunnerDescriptor", "bindings.AgentBinding", "runners.Budget"),
    ),
    Group(
        "bots",
        _("Bots & platforms"),
        ("bindings.Bot", "platforms.PlatformDelivery", "platforms.InboundRefusal"),
    ),
    Group(
        "automation",
        _("Automation"),
        ("webhooks.WebhookEndpoint", "webhooks.WebhookDelivery", "schedules.Schedule", "alerts.AlertSettings"),
    ),
    Group(
        "activity",
        _("Activity"),
        (
            "alerts.Alert",
            "takeover.WaitingConversation",
            "takeover.ConversationHold",
            "people.Person",
            "transcripts.TranscriptItem",
            "runners.Run",
            "transcripts.EventLog",
            "runners.PlatformActionRequest",
            "runners.ProxyCallAudit",
            "people.PersonAudit",
            "runners.DailySpend",
            "artifacts.Artifact",
            "transcripts.StateEntry",
            "runtimes.DevelopmentSession",
            "transcripts.RetentionPurge",
        ),
    ),
    Group(
        "access",
        _("Access"),
        (
            "bindings.Workspace",
            "bindings.WorkspaceMembership",
            "auth.User",
            "auth.Group",
            "bindings.ApiKey",
            "runtimes.DevelopmentToken",
            "artifacts.WorkspaceArtifactSettings",
        ),
    ),
)

OTHER = Group("other", _("Other"), ())

PAGES: tuple[Page, ...] = (
    Page("activity", "admin-conversations", _("Conversations"), after="takeover.ConversationHold"),
    Page("activity", "admin-usage", _("Model usage"), after="runners.DailySpend"),
)

# Celery beat's own rows: the scheduled events (Automation › Schedules) write them, beat reads them; editing
# them by hand would only be undone, so their admins are not registered.
HIDDEN_APPS = ("django_celery_beat",)
