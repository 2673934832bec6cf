"""JSON values as people read them on an admin page, instead of the JSON text: an object as `key  value`
lines, a list of plain values as one comma-separated line, a list of objects as numbered items, nesting
indented, nothing as `—`. The admin's read-only fields (templates/admin/includes/fieldset.html) and the
apps' display methods of JSON columns use it; console.css styles the `json-value` classes."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

EMPTY = "—"
MAX_DEPTH = 6  # deeper than a person reads; the rest is shown as its JSON-free text


def json_html(value: Any, *, depth: int = 0) -> SafeString:
    """`value` (what a JSONField holds) as HTML; every string in it is escaped."""
    if value is None or value == {} or value == []:
        return format_html("{}", EMPTY)
    if isinstance(value, bool):
        return format_html("{}", gettext("Yes") if value else gettext("No"))
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return format_html("{}", ", ".join(str(k) for k in value))
        rows = ((str(key), json_html(item, depth=depth + 1)) for key, item in value.items())
        return format_html('<dl class="json-value">{}</dl>', format_html_join("", "<dt>{}</dt><dd>{}</dd>", rows))
    if isinstance(value, list | tuple):
        if all(not isinstance(item, dict | list | tuple) for item in value):
            return format_html("{}", ", ".join(json_text(item) for item in value))
        items = ((json_html(item, depth=depth + 1),) for item in value)
        return format_html('<ol class="json-value">{}</ol>', format_html_join("", "<li>{}</li>", items))
    return format_html("{}", json_text(value))


def json_text(value: Any) -> str:
    """A plain value as text: nothing as `—`, yes/no for booleans, the rest as it prints."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return gettext("Yes") if value else gettext("No")
    return str(value)


def json_list_text(value: Any) -> str:
    """A list column (event types, scopes) as one comma-separated line for a list's cell."""
    if not value:
        return EMPTY
    if isinstance(value, list | tuple):
        return ", ".join(json_text(item) for item in value)
    return json_text(value)
