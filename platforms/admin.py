"""Admin of the chat platforms: the deliveries of runs to platforms (also shown on each run's page) and
refused inbound requests, read-only; and the "Set the platform webhook" action on the bots' list.

The run and bot admins belong to lower apps, which cannot know the platforms: this module adds the
delivery inline to the run admin and the action to the bot admin when the admin site is assembled.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from bindings.models import Bot
from platforms.connectors import connected_platforms, connection_label, connection_statuses
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.services import (
    ConnectionTestError,
    WebhookRegisterError,
    bot_connection_test,
    bot_webhook_register,
)
from runners.models import Run


class _ReadOnly:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PlatformDelivery)
class PlatformDeliveryAdmin(_ReadOnly, WorkspaceScopedAdmin[PlatformDelivery]):
    list_display = ["run", "bot", "platform", "kind", "status", "calls", "created_at"]
    list_filter = ["status", "platform", "workspace"]
    search_fields = ["chat_id", "bot__bot_id"]
    list_select_related = ["run", "bot", "workspace"]
    readonly_fields = [
        "workspace", "run", "bot", "platform", "kind", "status",
        "chat_id", "message_ids", "calls", "error", "created_at",
    ]  # fmt: skip


@admin.register(InboundRefusal)
class InboundRefusalAdmin(_ReadOnly, WorkspaceScopedAdmin[InboundRefusal]):
    """Refused requests counted per bot, reason, source address and window (a flood is one row)."""

    list_display = ["last_at", "bot", "platform", "reason", "remote_addr", "count", "first_at", "message"]
    list_filter = ["reason", "platform", "workspace"]
    search_fields = ["remote_addr", "bot__bot_id"]
    list_select_related = ["bot", "workspace"]
    readonly_fields = [
        "workspace", "bot", "platform", "reason", "message", "remote_addr",
        "count", "window_start", "first_at", "last_at",
    ]  # fmt: skip


_INLINE_FIELDS = ("platform", "kind", "status", "chat_id", "message_ids", "calls", "error", "created_at")


class PlatformDeliveryInline(admin.TabularInline[PlatformDelivery, Run]):
    model = PlatformDelivery
    fields = _INLINE_FIELDS
    readonly_fields = _INLINE_FIELDS
    extra = 0
    can_delete = False
    verbose_name_plural = _("platform deliveries")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.action(description=_("Set the platform webhook"))
def platform_webhook_set(modeladmin: admin.ModelAdmin[Bot], request: HttpRequest, queryset: QuerySet[Bot]) -> None:
    for bot in queryset.select_related("workspace"):
        url = request.build_absolute_uri(
            reverse("platform-webhook", args=[bot.platform, bot.workspace.slug, bot.bot_id])
        )
        try:
            note = bot_webhook_register(bot=bot, url=url)
        except WebhookRegisterError as exc:
            modeladmin.message_user(request, f"{bot}: {exc}", messages.ERROR)
        else:
            modeladmin.message_user(request, f"{bot}: {note} (webhook URL: {url})", messages.SUCCESS)


def bot_connection_check(bot: Bot) -> tuple[bool, str]:
    """Test connection of one bot: (whether it worked, the line for the operator)."""
    from platforms.adapters.onebot import OneBotAdapter

    if bot.platform == OneBotAdapter.platform:
        # OneBot has no API to call: the implementation connects to the host, and its socket's state says it all.
        state = connection_label(connection_statuses([bot]).get(bot.pk))
        return True, f"{bot}: OneBot connects to the host; its connection: {state}"
    try:
        return True, f"{bot}: {bot_connection_test(bot=bot)}"
    except ConnectionTestError as exc:
        return False, f"{bot}: {exc}"


@admin.action(description=_("Test connection"))
def platform_connection_test(modeladmin: admin.ModelAdmin[Bot], request: HttpRequest, queryset: QuerySet[Bot]) -> None:
    for bot in queryset.select_related("workspace"):
        worked, line = bot_connection_check(bot)
        modeladmin.message_user(request, line, messages.SUCCESS if worked else messages.ERROR)


@admin.display(description=_("connection"))
def bot_connection(obj: Bot) -> str:
    """The bot's long-lived platform connection (Discord's gateway, OneBot's socket) as last reported."""
    from platforms.adapters.onebot import OneBotAdapter

    if obj.pk is None or obj.platform not in (*connected_platforms(), OneBotAdapter.platform):
        return "-"
    return connection_label(connection_statuses([obj]).get(obj.pk))


def _extend_lower_admins() -> None:
    run_admin = admin.site.get_model_admin(Run)
    if PlatformDeliveryInline not in run_admin.inlines:
        type(run_admin).inlines = [*run_admin.inlines, PlatformDeliveryInline]
    bot_admin = admin.site.get_model_admin(Bot)
    actions = list(bot_admin.actions or [])
    for action in (platform_webhook_set, platform_connection_test):
        if action not in actions:
            actions.append(action)
    bot_admin.actions = actions
    # The bot's page has a "Test connection" button; its view (the bot admin's) calls this.
    type(bot_admin).connection_check = staticmethod(bot_connection_check)  # type: ignore[attr-defined]
    if bot_connection not in bot_admin.list_display:
        bot_admin.list_display = [*bot_admin.list_display, bot_connection]
        # django-stubs types readonly_fields as names only; Django takes callables as list_display does.
        type(bot_admin).readonly_fields = [*bot_admin.readonly_fields, bot_connection]  # type: ignore[list-item]


_extend_lower_admins()
