"""The website chat widget on the bot's admin page: the embed snippet of a web bot (`<script src=".../widget.js"
data-bot="<widget id>">`) with a copy button, shown under the bot's form (`BotAdmin.widget_snippet`, set here
when the admin is assembled: the bindings app's admin cannot import this app, which stands above it)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import escape

from bindings.models import Bot
from webchat.widget import widget_public_id


def widget_snippet(request: HttpRequest, bot: Bot) -> str:
    """What a website puts into its pages to show this bot's chat bubble (plain text, escaped where shown)."""
    src = request.build_absolute_uri(reverse("widget-script"))
    # A plain str (not marked safe): the page escapes it once more to show it as text.
    return f'<script src="{escape(src)}" data-bot="{escape(widget_public_id(bot))}" async></script>'


def widget_admin_extend() -> None:
    bot_admin = admin.site.get_model_admin(Bot)
    type(bot_admin).widget_snippet = staticmethod(widget_snippet)  # type: ignore[attr-defined]
