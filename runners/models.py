"""Runner descriptors: what the plugin runtime offers, as last synced.

Runs and the run ledger join this module with the orchestration issue.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class RunnerDescriptor(models.Model):
    """One AgentRunner as the runtime last reported it. Bindings refer to it by `runner_id`."""

    class Status(models.TextChoices):
        AVAILABLE = "available", "available"
        # The plugin is present but failed to load; `load_error` says why.
        ERROR = "error", "load error"
        # No longer reported by the runtime: bindings to it fail with `runner.not_found`.
        MISSING = "missing", "missing"

    runner_id = models.CharField(max_length=255, unique=True)
    plugin_author = models.CharField(max_length=64)
    plugin_name = models.CharField(max_length=64)
    plugin_version = models.CharField(max_length=64, blank=True)
    runner_name = models.CharField(max_length=64)
    label = models.JSONField(default=dict)
    description = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=dict)
    permissions = models.JSONField(default=dict)
    context_policy = models.JSONField(default=dict)
    config_schema = models.JSONField(default=list)
    manifest = models.JSONField(default=dict)
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.AVAILABLE, db_index=True)
    load_error = models.TextField(blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["runner_id"]

    def __str__(self) -> str:
        return self.runner_id

    def label_text(self, locale: str = "en_US") -> str:
        return _i18n_text(self.label, locale) or self.runner_name

    def description_text(self, locale: str = "en_US") -> str:
        return _i18n_text(self.description, locale)


def _i18n_text(value: Any, locale: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        return str(value.get(locale) or value.get("en_US") or next(iter(value.values())))
    return ""
