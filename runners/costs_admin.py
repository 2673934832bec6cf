"""Admin of budgets (editable, with what the current period has spent) and of daily spend (read-only: the
host writes it as model calls end). Staff other than superusers see only their workspaces', as everywhere
in admin. The per-day report across workspaces and bindings is `/admin/usage/` (runners/usage_report.py).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from runners.access.usage import decimal_text
from runners.costs import budget_status
from runners.models import Budget, DailySpend
from transcripts.admin import ReadOnlyWorkspaceAdmin


class BudgetAdminForm(forms.ModelForm[Budget]):
    class Meta:
        model = Budget
        fields = ["workspace", "name", "scope", "bot", "actor_id", "period", "amount", "enabled"]

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.workspace_id else None)
        scope, bot = cleaned.get("scope"), cleaned.get("bot")
        if scope == Budget.Scope.BOT and bot is None:
            self.add_error("bot", gettext("A bot budget names its bot."))
        elif scope != Budget.Scope.BOT and bot is not None:
            self.add_error("bot", gettext("Only a bot budget names a bot."))
        elif bot is not None and workspace is not None and bot.workspace_id != workspace.pk:
            self.add_error("bot", gettext("The bot belongs to another workspace."))
        if cleaned.get("actor_id") and scope != Budget.Scope.ACTOR:
            self.add_error("actor_id", gettext("Only an actor budget names an actor."))
        return cleaned


@admin.register(Budget)
class BudgetAdmin(WorkspaceScopedAdmin[Budget]):
    form = BudgetAdminForm
    list_display = ["__str__", "workspace", "scope", "bot", "actor_id", "period", "amount_display", "spent_display"]
    list_filter = ["scope", "period", "enabled", "workspace"]
    search_fields = ["name", "actor_id"]
    readonly_fields = ["budget_id", "spent_display", "created_at", "updated_at"]
    list_select_related = ["workspace", "bot"]
    fixed_fields = ("workspace",)
    scoped_foreign_keys = {"bot": "workspace"}

    @admin.display(description=_("amount"))
    def amount_display(self, obj: Budget) -> str:
        return f"{decimal_text(obj.amount)} {settings.LANGBOT_COST_CURRENCY}"

    @admin.display(description=_("spent this period"))
    def spent_display(self, obj: Budget) -> str:
        if obj.pk is None:
            return "-"
        status = budget_status(budget=obj)
        return (
            f"{decimal_text(status.spent)} {settings.LANGBOT_COST_CURRENCY} since {status.period_start}"
            f" (UTC); resets {status.resets_at:%Y-%m-%d %H:%M} UTC"
        )


@admin.register(DailySpend)
class DailySpendAdmin(ReadOnlyWorkspaceAdmin[DailySpend]):
    list_display = [
        "day",
        "workspace",
        "bot_key",
        "actor_key",
        "cost_display",
        "calls",
        "prompt_tokens",
        "completion_tokens",
    ]
    list_filter = ["day", "workspace"]
    search_fields = ["bot_key", "actor_key"]
    date_hierarchy = "day"
    list_select_related = ["workspace"]

    @admin.display(description=_("cost"), ordering="cost")
    def cost_display(self, obj: DailySpend) -> str:
        return f"{decimal_text(obj.cost)} {settings.LANGBOT_COST_CURRENCY}"
