"""Filters of the admin's templates: the dashboard's figures as people read them, and help texts shown as
text (`help_text`), and a read-only JSON column's value as key and value lines (`readonly_contents`) instead
of its JSON text. Django's admin prints a field's help text as HTML, so `bot:<bot_id>:<chat_id>` would be
taken for a tag and vanish. A help text that is already safe HTML (`format_html`, `mark_safe`) is kept as it
is; any other is escaped, and `code` in backticks is shown as code."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils.html import conditional_escape
from django.utils.safestring import SafeData, mark_safe

from foundation.readable import json_html

register = template.Library()

_BACKTICKED = re.compile(r"`([^`]+)`")


@register.filter
def help_text(value: Any) -> str:
    if isinstance(value, SafeData):
        return mark_safe(str(value))  # already safe: made by format_html or mark_safe
    escaped = str(conditional_escape(str(value)))
    # The code span's text is already escaped above; format_html would escape it twice.
    return mark_safe(_BACKTICKED.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


@register.simple_tag
def readonly_contents(field: Any) -> str:
    """A read-only field's value on a change form: a JSON column's as key and value lines
    (foundation.readable), any other as Django shows it."""
    name = field.field.get("name") if isinstance(field.field, dict) else None
    instance = getattr(field.form, "instance", None)
    if isinstance(name, str) and instance is not None:
        try:
            model_field = instance._meta.get_field(name)
        except FieldDoesNotExist:
            model_field = None
        if isinstance(model_field, models.JSONField):
            return json_html(getattr(instance, name))
    return str(field.contents())


@register.filter
def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


@register.filter
def seconds(value: float | None) -> str:
    """A run time: `–` for none, `850 ms` under a second, `12.3 s` under a minute, `4 min 05 s` past it."""
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"
