"""The admin site every `admin.register` lands on: Django's own `AdminSite` with a dashboard for its home page
and a menu grouped by setup (navigation.py) instead of apps in alphabetical order.

It is installed as the default site (apps.ConsoleAdminConfig), so the apps' `admin.py` modules keep their
`ModelAdmin`s and `admin.site.register` calls as they are.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext_lazy as _

from langbot_host.admin_site.dashboard import DEFAULT_HOURS, dashboard_for
from langbot_host.admin_site.navigation import GROUPS, OTHER, PAGES

MAX_HOURS = 24 * 7


def _hours(request: HttpRequest) -> int:
    try:
        hours = int(request.GET.get("hours", DEFAULT_HOURS))
    except ValueError:
        return DEFAULT_HOURS
    return min(max(hours, 1), MAX_HOURS)


def _page_entry(url_name: str, name: Any) -> dict[str, Any] | None:
    try:
        url = reverse(url_name)
    except NoReverseMatch:
        return None
    return {
        "name": name,
        "object_name": url_name.replace(":", "-"),
        "perms": {"view": True},
        "admin_url": url,
        "add_url": None,
        "view_only": True,
    }


class ConsoleAdminSite(admin.AdminSite):
    site_header = "LangBot Host"
    site_title = _("LangBot Host admin")

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        """The index and the side menu: models in groups by setup order. An app's own page (`/admin/<app>/`)
        still lists that app's models, as Django does."""
        if app_label:
            return super().get_app_list(request, app_label)
        entries = {
            entry["model"]._meta.label: entry
            for app in self._build_app_dict(request).values()
            for entry in app["models"]
        }
        grouped: list[dict[str, Any]] = []
        for group in (*GROUPS, OTHER):
            labels = group.models if group is not OTHER else sorted(entries)
            models = [entries.pop(label) for label in labels if label in entries]
            for page in PAGES:
                if page.group != group.slug:
                    continue
                entry = _page_entry(page.url_name, page.name)
                if entry is None:
                    continue
                labels = [m["model"]._meta.label if "model" in m else "" for m in models]
                at = labels.index(page.after) + 1 if page.after in labels else 0
                models.insert(at, entry)
            if models:
                grouped.append(
                    {
                        "name": group.name,
                        "app_label": group.slug,
                        "app_url": "",
                        "has_module_perms": True,
                        "models": models,
                    }
                )
        return grouped

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        dashboard = dashboard_for(user=request.user, hours=_hours(request))
        chart = {
            "labels": [f"{row.hour:%H:00}" for row in dashboard.per_hour],
            "runs": [row.runs for row in dashboard.per_hour],
            "messages": [row.messages for row in dashboard.per_hour],
            "runsLabel": str(_("runs")),
            "messagesLabel": str(_("messages")),
        }
        context = {"dashboard": dashboard, "chart_data": chart, **(extra_context or {})}
        return super().index(request, context)
