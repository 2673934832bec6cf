"""Admin for schedules: staff manage the schedules of their workspaces here; the form is checked by the
API's spec and services, and saving or deleting goes through the services so beat's rows follow."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from pydantic import ValidationError

from bindings.admin_scope import WorkspaceScopedAdmin
from foundation.api_errors import field_errors
from platforms.schedules.models import Schedule
from platforms.schedules.services import (
    ScheduleValidationError,
    schedule_apply,
    schedule_delete,
    schedule_targets_resolve,
)
from platforms.schedules.specs import ScheduleIn

# A spec key the form edits under another name.
SPEC_INPUTS = {"bot_id": "bot", "binding_id": "binding"}


class ScheduleAdminForm(forms.ModelForm[Schedule]):
    class Meta:
        model = Schedule
        fields = [
            "workspace", "schedule_id", "name", "cron", "timezone", "enabled", "bot", "binding", "event_type",
            "input_text", "chat_id", "conversation_id",
        ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec: ScheduleIn | None = None

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        bot, binding = cleaned.get("bot"), cleaned.get("binding")
        values = {
            "name": cleaned.get("name") or "",
            "cron": cleaned.get("cron") or "",
            "timezone": cleaned.get("timezone") or "",
            "enabled": bool(cleaned.get("enabled")),
            "bot_id": bot.bot_id if bot else None,
            "binding_id": binding.binding_id if binding else None,
            "event_type": cleaned.get("event_type") or "",
            "input_text": cleaned.get("input_text") or "",
            "chat_id": cleaned.get("chat_id") or None,
            "conversation_id": cleaned.get("conversation_id") or None,
        }
        try:
            spec = ScheduleIn.model_validate(values)
        except ValidationError as exc:
            self._add_spec_errors(field_errors(exc))
            return cleaned
        workspace = self.instance.workspace if self.instance.pk else cleaned.get("workspace")
        if workspace is not None:
            try:
                schedule_targets_resolve(workspace=workspace, spec=spec)
            except ScheduleValidationError as exc:
                self._add_spec_errors(exc.fields)
                return cleaned
        self.spec = spec
        return cleaned

    def _add_spec_errors(self, fields: dict[str, str]) -> None:
        for key, message in fields.items():
            name = SPEC_INPUTS.get(key, key)
            if name in self.fields and name not in self.errors:
                self.add_error(name, message)
            elif name not in self.fields:
                self.add_error(None, f"{key}: {message}")


@admin.register(Schedule)
class ScheduleAdmin(WorkspaceScopedAdmin[Schedule]):
    form = ScheduleAdminForm
    list_display = [
        "schedule_id", "workspace", "name", "cron", "timezone", "enabled", "bot", "binding", "last_fired_at",
    ]  # fmt: skip
    list_filter = ["enabled", "workspace"]
    search_fields = ["schedule_id", "name", "input_text"]
    prepopulated_fields = {"schedule_id": ["name"]}
    readonly_fields = ["last_fired_at", "last_event_id", "last_error", "last_error_at", "created_at", "updated_at"]
    list_select_related = ["workspace", "bot", "binding"]
    fixed_fields = ("workspace", "schedule_id")
    scoped_foreign_keys = {"bot": "workspace", "binding": "workspace"}

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        assert isinstance(form, ScheduleAdminForm)
        assert form.spec is not None
        schedule_apply(schedule=obj, spec=form.spec)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedule_delete(schedule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            schedule_delete(schedule=schedule)
